"""The parts of the reverse-index benchmark (bench/reverse_bench.py, run by ./bench/reverse.sh): `likers`
(1. the likers page of one video with many likers), `projector` (2. the reverse projector draining a backlog)
and `report`."""

import os

from bench.common import Interference, make_log

log = make_log("reverse-bench")
# Every process of the run carries application_name = $PGAPPNAME (bench/reverse.sh sets it).
APP_NAME = os.environ.get("PGAPPNAME", "likes-reverse-bench")
INTERFERENCE = Interference(APP_NAME, log)

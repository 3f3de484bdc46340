"""The parts of the read-path benchmark (bench/read_bench.py, run by ./bench/read.sh): `clients` (the spawned
client processes), `batch` (1. the batch query), `my_likes` (2. the my-likes pages), `rebuild` (3. the
relation-cache rebuild) and `report`."""

import os

from bench.common import Interference, make_log

log = make_log("read-bench")
# Every process of the run carries application_name = $PGAPPNAME (bench/read.sh sets it; libpq reads it), so
# a connection without it is another benchmark (they TRUNCATE the same tables) or a stray client.
APP_NAME = os.environ.get("PGAPPNAME", "likes-read-bench")
INTERFERENCE = Interference(APP_NAME, log)

BQ_PREFIX = "rbq-v"  # the batch-query videos
LIST_PREFIX = "rbl-v"  # the 50,000 liked videos of the my-likes user
REB_PREFIX = "rbr-v"  # the videos of the rebuild relations

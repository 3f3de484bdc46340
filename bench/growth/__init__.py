"""The parts of the growth benchmark (bench/growth_bench.py, run by ./bench/growth.sh): `plan` (the shape of
the history, deterministic by relation index, so a larger size is the smaller one grown), `load` (COPY of that
history into every store, and what it derives), `measure` (the timed operations, the pipeline drain, the
plans) and `report`."""

import os

from bench.common import Interference, make_log

log = make_log("growth-bench")
# Every connection of the run carries application_name = $PGAPPNAME (bench/growth.sh sets it; libpq reads it).
APP_NAME = os.environ.get("PGAPPNAME", "likes-growth-bench")
INTERFERENCE = Interference(APP_NAME, log)

PREFIX = "bgr-"  # every video id and username of this benchmark starts with it
HOT_VIDEO = "bgr-hot"
OPERATOR = "bgr-operator"  # the actor of the exact check runs

# Safety bound: every loop stops at its deadline AND after this many iterations.
MAX_LOOP_ITERATIONS = 1_000_000

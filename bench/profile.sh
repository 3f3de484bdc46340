#!/usr/bin/env bash
# Where the time goes (issue 15 §6): one hot path run in a loop in one process, profiled.
#
#   ./bench/profile.sh SCENARIO [--seconds 20] [--flame]      SCENARIO: command | http | batch | projector | snapshot
#
# cProfile's summary (cumulative and own time, top 40) goes to bench/results/profiles/SCENARIO.txt; with --flame,
# py-spy also samples the same loop into bench/results/profiles/SCENARIO.svg (a flame graph). Same setup and bench
# databases / Redis namespace as bench/run.sh (bench/env.sh, which also takes the one-benchmark-at-a-time lock);
# only 127.0.0.1 is contacted; the scenario's data is removed at the end.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"  # lock, setup_all, the bench databases and Redis namespace, PY, bench_drive
export LIKES_NUDGE_ENABLED="false"
export PGAPPNAME="likes-profile-bench"

bench_drive --setsid --name "profile" bench.profile "$@"

"""The one bench harness every benchmark runs on (`bench/run.sh NAME`):

driver   the frame: options, the safety checks, the machine, the wait for a quiet machine, the result file;
pool     the one pool of spawned processes (jobs name their role) and gunicorn;
roles    the loops those processes run: command clients, the tracked command load, the pipeline's loops;
phases   what the driver does with them: sessions of load, the drain, windows of commands, pgbench, backlogs;
seed     the bench data, bulk rows, resets, a benchmark's own database set;
checks   the result checks against the relation facts;
sampler  CPU and database waits over a window;
report   numbers, tables, docs/benchmarks.md (the sections and the summary table: `python -m
         bench.harness.report --table`) and bench/results/history.jsonl.

Importing driver, pool, report or sampler does not import Django (spawned processes import them before setup)."""

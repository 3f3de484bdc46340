"""The one bench harness every benchmark runs on (`bench/run.sh NAME`): driver (options, safety checks, the
machine, the result file), pool (the spawned processes, gunicorn), roles (their loops), phases (sessions of load,
the drain, pgbench, backlogs, checks), seed (data, bulk rows, resets), checks (results against the facts), sampler
(CPU and waits) and report (tables, docs/benchmarks.md, the history and the summary table)."""

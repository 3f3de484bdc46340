"""The command path: `bench/run.sh command` (bench.py: service layer, HTTP, the naive counter row, the pgbench
ceiling) and `bench/run.sh levers` (levers.py: issue 15's changes one at a time, before and after)."""

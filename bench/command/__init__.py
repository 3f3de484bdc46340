"""The command path: `bench/run.sh command` (bench.py) and `bench/run.sh levers` (levers.py)."""

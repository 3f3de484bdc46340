"""Costs that do not grow with history: `bench/run.sh growth` (bench.py; plan.py, measure.py)."""

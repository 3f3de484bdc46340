"""Costs that do not grow with history: `bench/run.sh growth` (bench.py); plan.py: the shape of the history;
load.py: its COPY into every store; measure.py: the timed operations, their plans, the drain."""

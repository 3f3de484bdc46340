"""Reconciliation and repair: `bench/run.sh reconcile` (bench.py), on the data set of seed.py."""

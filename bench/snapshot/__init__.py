"""Recovery snapshots: `bench/run.sh snapshot` (bench.py; variants.py: ours, the naive dump, the ceiling)."""

"""Recovery snapshots: `bench/run.sh snapshot` (bench.py: builds idle and under load, a lost partition restored
against repaired from the facts; variants.py: ours, the naive dump and the raw SQL ceiling, and their loads)."""

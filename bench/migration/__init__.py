"""The virtual-bucket migration of count partitions: `bench/run.sh migration` (bench.py; seed.py, moves.py)."""

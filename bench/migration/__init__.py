"""The virtual-bucket migration of count partitions: `bench/run.sh migration` (bench.py), on its own databases;
seed.py: the data set and the throughput backlogs; moves.py: ours, the naive stop-the-world move, the COPY ceiling."""

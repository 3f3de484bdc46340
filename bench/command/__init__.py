"""The parts of the command-path benchmark (bench/command_bench.py, run by ./bench/run.sh): `runs` (the
measured windows at each layer and the pgbench ceiling) and `report` (ratios, tables, the docs section)."""

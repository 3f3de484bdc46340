"""The benchmarks: ./bench/run.sh (the like command path, bench/command_bench.py), ./bench/projection.sh (the
count pipeline), ./bench/read.sh (the read path) and ./bench/reverse.sh (the reverse "who liked" index)."""

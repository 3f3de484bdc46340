"""The one bench harness every benchmark runs on (`bench/run.sh NAME`); docs/benchmarks.md lists its modules."""

"""Benchmark harness for the like command path (run it with ./bench/run.sh)."""

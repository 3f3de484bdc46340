"""The benchmarks: `bench/run.sh NAME` (bench/run.sh lists the names), on the one harness in bench/harness/."""

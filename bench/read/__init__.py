"""The read path: `bench/run.sh read` (bench.py; clients.py: its client roles; pages.py: my-likes, the rebuild)."""

"""The read path: `bench/run.sh read` (bench.py: the batch query warm, cold and with Redis down; clients.py: its
client roles; pages.py: the my-likes page against OFFSET, and the relation-cache rebuild)."""

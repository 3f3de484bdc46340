#!/usr/bin/env bash
# Command throughput and commit -> displayCount convergence on both topologies in one run (issue 16):
# LIKES_TOPOLOGY=single (one PostgreSQL server, one Redis), then scaled (two PostgreSQL servers, a three-node
# Redis Cluster; the broker on the plain Redis). Each half is bench/run.sh (service layer, naive baseline,
# pgbench ceiling; no HTTP) and bench/convergence.sh (the Celery worker path), on the bench's own databases
# and Redis namespace; only 127.0.0.1 is contacted. Results: bench/results/topology/*.json, the table on
# stdout and the "Topologies" section of docs/benchmarks.md.
#
#   ./bench/topology.sh [--no-docs]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out=bench/results/topology
mkdir -p "$out"
# bench/run.sh and bench/convergence.sh write their latest.json: keep the ones of their own full runs.
keep=$(mktemp -d)
cp bench/results/latest.json bench/results/convergence_latest.json "$keep/" 2>/dev/null || true
trap 'cp "$keep"/*.json bench/results/ 2>/dev/null || true; rm -rf "$keep"' EXIT
for topology in single scaled; do
  echo "[bench] topology $topology: the command path" >&2
  LIKES_TOPOLOGY=$topology ./bench/run.sh --skip-http --rounds 2 --no-docs
  cp bench/results/latest.json "$out/command_$topology.json"
  echo "[bench] topology $topology: convergence (Celery worker)" >&2
  LIKES_TOPOLOGY=$topology ./bench/convergence.sh --paths celery --duration 15 --no-docs
  cp bench/results/convergence_latest.json "$out/convergence_$topology.json"
done
.venv/bin/python -m bench.topology_report "$out" "$@"

"""Setup helper: `probe.py pg URL` / `probe.py redis URL` exit 0 when the server answers."""

import sys


def main() -> int:
    kind, url = sys.argv[1], sys.argv[2]
    try:
        if kind == "pg":
            import psycopg
            from psycopg.conninfo import conninfo_to_dict, make_conninfo

            info = conninfo_to_dict(url)
            info["dbname"] = "postgres"
            with psycopg.connect(make_conninfo(**info), connect_timeout=3) as conn:
                conn.execute("SELECT 1")
        elif kind == "redis":
            import redis
            import redis.cluster

            if url.startswith("redis+cluster://"):  # startup nodes host:port,host:port (redis_client)
                nodes = [n.rpartition(":") for n in url.split("://", 1)[1].split("/", 1)[0].split(",")]
                client = redis.cluster.RedisCluster(
                    startup_nodes=[redis.cluster.ClusterNode(h, int(p)) for h, _, p in nodes],
                    socket_connect_timeout=2, socket_timeout=2)
                if client.cluster_info().get("cluster_state") != "ok":
                    raise RuntimeError("cluster_state is not ok")
            else:
                redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2).ping()
        else:
            return 2
    except Exception as exc:  # noqa: BLE001 - any failure means "not usable"
        print(f"{kind} at {url.split('@')[-1]} not usable: {exc.__class__.__name__}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

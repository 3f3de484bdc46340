"""Redis keys and Lua scripts of the count cache (CCACHE-1, CCACHE-2). Nothing else builds them.

Every key carries the COUNT CACHE generation (COUNT_CACHE_GENERATION, E-15), not the projection
generation: a rebuild writes a new namespace and a CAS of the durable row switches readers to it.

- View layer, read by `like-count` and the batch query:
  `<prefix>:count:view:g<gen>:{<videoId>}` -> "displayCount|snapshotId|generation|generatedAt".
  Written only from the durable display snapshot (VideoDisplayCount), never incremented; a write
  with a lower snapshot id than the stored one is refused (VIEW_WRITE_LUA).
- Bucket layer, a mirror of the durable vbuckets:
  `<prefix>:count:g<gen>:{<videoId>|vb-<bucket>}` -> "activeCount|bucketVersion|routeEpoch|generation".
  The hash tag holds both the video and the bucket, so one hot video's buckets spread over the slots
  of a Redis Cluster (CCACHE-2; `like:count:{videoId}:vb-37` would put all of them on one slot).
- Hot-spot figures (issue 32 §2): `<prefix>:count:hot:{<tag>}:<kind>:<slot>`, sorted sets of writes per
  10-second slot, written and read only by `counting.hotspots` (figures, never counts).
- Generation registry: `<prefix>:count:gens` (hash generation -> status), a mirror of the durable
  COUNT_CACHE_GENERATION rows, written after each commit that changes a status. `buckets_write` reads
  it before BUCKET_WRITE_LUA runs and writes only live generations (ACTIVE, or building), so a task of a
  RETIRED/FAILED generation that arrives late cannot write (CCACHE-3 step 3, T7). A missing registry
  refuses every write (NO_REGISTRY) until the service restores it from the table.

Redis Cluster (issue 16, D93): the registry and a bucket key hash to different slots, so no script
touches both: the registry is read first, in its own command, and the script checks only the bucket's
(routeEpoch, bucketVersion). The check is no longer atomic with the write; a generation retired between
the two can take one more write into keys no reader reads (they expire), and the live generation stays
safe, because generations differ by key name and the version/epoch check keeps each key monotonic.
"""

from __future__ import annotations

import random

from django.conf import settings

from likes_project.redis_client import Read, cache_redis, hash_replace, node_tags, read_now, scripts_run, tagged

VIEW_TTL_S = 24 * 3600
BUCKET_TTL_S = 7 * 24 * 3600
GENS_TTL_S = 7 * 24 * 3600
CLUSTER_SLOTS = 16384


def _p() -> str:
    return settings.LIKES_REDIS_PREFIX


def view_key(generation: int, video_id: str) -> str:
    return f"{_p()}:count:view:g{generation}:{{{video_id}}}"


def bucket_key(generation: int, video_id: str, virtual_bucket: int) -> str:
    return f"{_p()}:count:g{generation}:{{{video_id}|vb-{virtual_bucket}}}"


def hotspot_key(tag: str, kind: str, slot: int) -> str:
    """A 10-second slot of the hot-spot figures (counting.hotspots): `<prefix>:count:hot:{<tag>}:<kind>:<slot>`, the
    tag a count partition (its videos `v`, buckets `b`) or one of the global sets (users `u`, relation shards `s`),
    so the slots a window adds up share one Cluster slot."""
    return f"{_p()}:count:hot:{{{tag}}}:{kind}:{slot}"


def risk_likes_key(user_id: int, minute: int) -> str:
    """The risk scorer's count of an account's likes in one minute (counting.risk.scorer)."""
    return f"{_p()}:count:risk:{{u{user_id}}}:likes:{minute}"


def risk_device_key(device: str) -> str:
    """The risk scorer's set of the accounts seen on one device (a ring's evidence)."""
    return f"{_p()}:count:risk:{{d:{device}}}:users"


def gens_key() -> str:
    return f"{_p()}:count:gens"


def key_pattern() -> str:
    """Every count-cache key (views, buckets, registry): for SCAN, never KEYS."""
    return f"{_p()}:count:*"


def _ttl_ms(base_s: int) -> int:
    return int(base_s * 1000 * random.uniform(0.8, 1.2))  # ±20 % jitter (K1)


# --- Redis Cluster slot arithmetic (CCACHE-2) ----------------------------------------------------


def crc16_xmodem(data: bytes) -> int:
    """CRC16-CCITT/XMODEM (poly 0x1021, init 0), the checksum Redis Cluster hashes keys with."""
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else (crc << 1)
            crc &= 0xFFFF
    return crc


def hash_tag(key: str | bytes) -> bytes:
    """The part of a key Redis Cluster hashes: the content of the first `{...}` if it is non-empty."""
    raw = key.encode() if isinstance(key, str) else key
    start = raw.find(b"{")
    if start != -1:
        end = raw.find(b"}", start + 1)
        if end > start + 1:
            return raw[start + 1:end]
    return raw


def keyslot(key: str | bytes) -> int:
    return crc16_xmodem(hash_tag(key)) % CLUSTER_SLOTS


# --- Lua -------------------------------------------------------------------------------------------

# KEYS[1] bucket key. ARGV: generation, activeCount, bucketVersion, routeEpoch, ttl_ms.
# Accept only when (routeEpoch, bucketVersion) is not below the stored pair: a newer route epoch wins,
# and within one epoch the version decides. (`buckets_write` has checked the generation is live.)
BUCKET_WRITE_LUA = """
local cur = redis.call('GET', KEYS[1])
if cur then
  local _, ver, epoch = string.match(cur, '^(%-?%d+)|(%d+)|(%d+)|')
  if ver then
    local new_epoch, new_ver = tonumber(ARGV[4]), tonumber(ARGV[3])
    if new_epoch < tonumber(epoch) then return 'STALE_EPOCH' end
    if new_epoch == tonumber(epoch) and new_ver < tonumber(ver) then return 'STALE_VERSION' end
  end
end
redis.call('SET', KEYS[1], ARGV[2] .. '|' .. ARGV[3] .. '|' .. ARGV[4] .. '|' .. ARGV[1], 'PX', ARGV[5])
return 'OK'
"""

# KEYS[1] view key. ARGV: value, snapshotId, ttl_ms. A lower snapshot id than the stored one loses.
VIEW_WRITE_LUA = """
local cur = redis.call('GET', KEYS[1])
if cur then
  local sid = string.match(cur, '^[^|]*|(%d+)|')
  if sid and tonumber(sid) > tonumber(ARGV[2]) then return 0 end
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3])
return 1
"""


# --- generation registry -----------------------------------------------------------------------


def sentinel_keys(generation: int) -> list[str]:
    """Present while the generation's cached content is whole; gone after a flush (loss detector). One
    per server of the cache role (node_tags): a Cluster node restarted empty loses its own."""
    return [tagged(f"{_p()}:count:sentinel:g{generation}", tag) for tag in node_tags()]


def sentinel_set(generation: int) -> None:
    pipe = cache_redis().pipeline(transaction=False)
    for key in sentinel_keys(generation):
        pipe.set(key, "1")
    pipe.execute()


def sentinel_present(generation: int) -> bool:
    """Every server still holds the generation's sentinel."""
    keys = sentinel_keys(generation)
    return int(cache_redis().exists(*keys)) == len(keys)


def gens_mirror_write(statuses: dict[int, str]) -> None:
    """Replace the registry with `statuses` (generation -> status, from the durable table)."""
    hash_replace(gens_key(), {str(g): s for g, s in statuses.items()}, ttl_ms=_ttl_ms(GENS_TTL_S))


def gens_mirror_read() -> dict[int, str]:
    return {int(g): s.decode() for g, s in cache_redis().hgetall(gens_key()).items()}


# --- bucket layer ------------------------------------------------------------------------------


def buckets_write(generation: int, rows: list[tuple[str, int, int, int, int]]) -> list[str]:
    """(video id, bucket, active count, bucket version, route epoch) -> BUCKET_WRITE_LUA verdicts
    ("OK", "STALE_VERSION", "STALE_EPOCH", "GEN_RETIRED", "NO_REGISTRY", ...), pipelined."""
    from likes_project.generations.models import LIVE

    if not rows:
        return []
    registry = gens_mirror_read()
    status = registry.get(generation)
    if status is None or status not in LIVE:
        # M15: an old generation's write refused; `write_buckets` counts likes_count_cache_bucket_refused_total{reason}.
        refusal = "NO_REGISTRY" if not registry else "GEN_UNKNOWN" if status is None else f"GEN_{status}"
        return [refusal] * len(rows)
    verdicts = scripts_run([(BUCKET_WRITE_LUA, [bucket_key(generation, video_id, vb)],
                             [generation, count, version, epoch, _ttl_ms(BUCKET_TTL_S)])
                            for video_id, vb, count, version, epoch in rows])
    return [v.decode() if isinstance(v, bytes) else str(v) for v in verdicts]


def buckets_read(generation: int, keys: list[tuple[str, int]]) -> dict[tuple[str, int], tuple[int, int, int]]:
    """(video id, bucket) -> (active count, bucket version, route epoch) of the stored keys."""
    if not keys:
        return {}
    pipe = cache_redis().pipeline(transaction=False)
    for video_id, vb in keys:
        pipe.get(bucket_key(generation, video_id, vb))
    out = {}
    for key, raw in zip(keys, pipe.execute(), strict=True):
        if raw is not None:
            count, version, epoch, _gen = raw.decode().split("|", 3)
            out[key] = (int(count), int(version), int(epoch))
    return out


# --- view layer --------------------------------------------------------------------------------


def views_write(generation: int, rows: list[tuple[str, int, int, str]]) -> int:
    """(video id, display count, snapshot id, generatedAt ISO) -> view keys of `generation`, one
    pipelined round trip; a row older (lower snapshot id) than the stored view is refused. Every key
    expires (with jitter); the durable snapshot is the fallback. Returns how many were written."""
    if not rows:
        return 0
    return sum(int(x) for x in scripts_run([
        (VIEW_WRITE_LUA, [view_key(generation, video_id)],
         [f"{display}|{snapshot_id}|{generation}|{generated_at}", snapshot_id, _ttl_ms(VIEW_TTL_S)])
        for video_id, display, snapshot_id, generated_at in rows]))


def views_read_plan(generation: int, video_ids: list[str]) -> Read[dict[str, tuple[int, int, str]]]:
    """video id -> (display count, snapshot id, generatedAt) for the hits (a GET per key rather than
    MGET, so that a Cluster client can split the pipeline by node)."""
    keys = [view_key(generation, v) for v in video_ids]

    def queue(pipe) -> None:
        for key in keys:
            pipe.get(key)

    def parse(replies: list) -> dict[str, tuple[int, int, str]]:
        out = {}
        for video_id, raw in zip(video_ids, replies, strict=True):
            if raw is not None:
                display, snapshot_id, _gen, generated_at = raw.decode().split("|", 3)
                out[video_id] = (int(display), int(snapshot_id), generated_at)
        return out

    return Read(len(keys), queue, parse)


def views_read(generation: int, video_ids: list[str]) -> dict[str, tuple[int, int, str]]:
    """`views_read_plan` in ONE round trip of its own."""
    return read_now(views_read_plan(generation, video_ids))


def view_read(generation: int, video_id: str) -> tuple[int, int, str] | None:
    """(display count, snapshot id, generatedAt) or None on a miss."""
    return views_read(generation, [video_id]).get(video_id)


def views_delete(generations: list[int], video_ids: list[str]) -> int:
    """Drop the view keys of these videos in these count-cache generations (retired videos)."""
    keys = [view_key(g, v) for g in generations for v in video_ids]
    return int(cache_redis().delete(*keys)) if keys else 0

"""Redis key builders and Lua scripts for the relations app. Nothing else builds these keys.

Keys carry the deployment prefix and a Redis Cluster hash tag `{...}` around the part that must
stay on one slot.
"""

from __future__ import annotations

import json
import random

from django.conf import settings

from likes_project.redis_client import Read, cache_redis, hash_replace, node_tags, read_now, scripts_run, tagged


def _p() -> str:
    return settings.LIKES_REDIS_PREFIX


# --- video visibility snapshot (CMD-12) --------------------------------------------------------


def visibility_key(video_id: str) -> str:
    return f"{_p()}:vis:v1:{{{video_id}}}"


def edge_key(author_id: int, user_id: int) -> str:
    return f"{_p()}:edge:v1:{{{author_id}}}:{user_id}"


# Set the value only when it is not older than the cached one: a slow reader that loaded version 3
# from the database cannot overwrite version 4 written by a push in the meantime.
_VERSIONED_SET = """
local cur = redis.call('GET', KEYS[1])
if cur then
  local v = tonumber(string.match(cur, '^(%d+)|'))
  if v and v > tonumber(ARGV[1]) then return 0 end
end
redis.call('SET', KEYS[1], ARGV[1] .. '|' .. ARGV[2], 'PX', ARGV[3])
return 1
"""


def _ttl_ms() -> int:
    base = settings.VISIBILITY_CACHE_TTL_S * 1000
    # Jitter spreads expiries so a popular set of videos does not miss all at once.
    return int(base * random.uniform(0.8, 1.2)) + 1


def _gets_read(keys: list[str], decode) -> Read:
    """A GET of each of `keys` (not one MGET: the keys hash to different slots, and a Cluster pipeline
    sends each node its own GETs, the nodes side by side; SNAP-2); `decode(index, raw)` -> (name, value)
    of each hit."""
    def parse(replies: list) -> dict:
        return dict(decode(i, raw) for i, raw in enumerate(replies) if raw is not None)

    def queue(pipe) -> None:
        for key in keys:
            pipe.get(key)

    return Read(len(keys), queue, parse)


def visibility_read(video_ids: list[str]) -> Read[dict[str, dict]]:
    """Cached snapshot dicts (or {"missing": True}) of the videos that are cached."""
    return _gets_read([visibility_key(v) for v in video_ids],
                      lambda i, raw: (video_ids[i], json.loads(raw.decode().partition("|")[2])))


def visibility_cache_get_many(video_ids: list[str]) -> dict[str, dict]:
    """`visibility_read` in one round trip of its own."""
    return read_now(visibility_read(video_ids))


def visibility_cache_put_many(snapshots: list[tuple[str, int, dict]]) -> None:
    """(video id, version, snapshot) entries through the version-guarded script; one round trip."""
    if not snapshots:
        return
    scripts_run([(_VERSIONED_SET, [visibility_key(video_id)], [version, json.dumps(snapshot), _ttl_ms()])
                 for video_id, version, snapshot in snapshots])


def visibility_cache_get(video_id: str) -> dict | None:
    return visibility_cache_get_many([video_id]).get(video_id)


def visibility_cache_put(video_id: str, version: int, snapshot: dict) -> None:
    visibility_cache_put_many([(video_id, version, snapshot)])


def edge_read(pairs: list[tuple[int, int]]) -> Read[dict[tuple[int, int], dict]]:
    """(author, user) -> {"f": friends, "b": author blocks user} for the cached pairs."""
    return _gets_read([edge_key(a, u) for a, u in pairs], lambda i, raw: (pairs[i], json.loads(raw)))


def edge_cache_get_many(pairs: list[tuple[int, int]]) -> dict[tuple[int, int], dict]:
    """`edge_read` in one round trip of its own."""
    return read_now(edge_read(pairs))


def edge_cache_put_many(edges: dict[tuple[int, int], dict]) -> None:
    if not edges:
        return
    pipe = cache_redis().pipeline(transaction=False)
    for (a, u), value in edges.items():
        pipe.set(edge_key(a, u), json.dumps(value), px=_ttl_ms())
    pipe.execute()


def edge_cache_get(author_id: int, user_id: int) -> dict | None:
    return edge_cache_get_many([(author_id, user_id)]).get((author_id, user_id))


def edge_cache_put(author_id: int, user_id: int, edges: dict) -> None:
    edge_cache_put_many({(author_id, user_id): edges})


def edge_cache_invalidate(a: int, b: int) -> None:
    cache_redis().delete(edge_key(a, b), edge_key(b, a))


# --- token buckets (CMD-18, RISK-1) -------------------------------------------------------------


def ratelimit_user_key(user_id: int) -> str:
    return f"{_p()}:rl:user:{{{user_id}}}"


def ratelimit_ip_key(ip: str) -> str:
    return f"{_p()}:rl:ip:{{{ip}}}"


def ratelimit_relation_key(user_id: int, video_id: str) -> str:
    return f"{_p()}:rl:rel:{{{user_id}}}:{video_id}"


def ratelimit_device_key(device_id: str) -> str:
    return f"{_p()}:rl:dev:{{{device_id}}}"


def behaviour_keys(user_id: int, video_id: str, *, now_s: float) -> list[str]:
    """A user's behaviour windows (RISK-1 layer 2), on the slot of the user's other limit keys: the distinct videos
    of this minute and the distinct devices of this hour (HyperLogLogs), and the relation's effective toggles in
    the toggle window (a counter that expires)."""
    minute, hour = int(now_s // 60), int(now_s // 3600)
    return [f"{_p()}:beh:{{{user_id}}}:v:{minute}", f"{_p()}:beh:{{{user_id}}}:d:{hour}",
            f"{_p()}:beh:{{{user_id}}}:t:{video_id}"]


# KEYS: the videos HLL, the devices HLL, the toggles counter. ARGV: video, device ("" none), the HLLs' TTLs (s).
# Adds this command to the windows and returns {distinct videos this minute, distinct devices this hour, toggles}.
BEHAVIOUR_CHECK = """
redis.call('PFADD', KEYS[1], ARGV[1])
redis.call('EXPIRE', KEYS[1], ARGV[3])
if ARGV[2] ~= '' then
  redis.call('PFADD', KEYS[2], ARGV[2])
  redis.call('EXPIRE', KEYS[2], ARGV[4])
end
return {redis.call('PFCOUNT', KEYS[1]), redis.call('PFCOUNT', KEYS[2]), tonumber(redis.call('GET', KEYS[3]) or '0')}
"""
# KEYS: the toggles counter. ARGV: the window (s). One more effective toggle; the window starts at the first.
TOGGLE_RECORD = """
local n = redis.call('INCR', KEYS[1])
if n == 1 then redis.call('EXPIRE', KEYS[1], ARGV[1]) end
return n
"""


def behaviour_check(user_id: int, video_id: str, device_id: str, *, now_s: float) -> tuple[int, int, int]:
    """(distinct videos this minute, distinct devices this hour, the relation's toggles), this command included."""
    [result] = scripts_run([(BEHAVIOUR_CHECK, behaviour_keys(user_id, video_id, now_s=now_s),
                             [video_id, device_id, 120, 7200])])
    return int(result[0]), int(result[1]), int(result[2])


def toggle_record(user_id: int, video_id: str, *, now_s: float, window_s: int) -> None:
    scripts_run([(TOGGLE_RECORD, behaviour_keys(user_id, video_id, now_s=now_s)[2:], [window_s])])


# ARGV: rate (tokens per second), burst, need, consume (1/0). Uses the server clock so every web
# process shares one time base. Returns {allowed, retry_after_ms}.
TOKEN_BUCKET = """
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local need = tonumber(ARGV[3])
local consume = tonumber(ARGV[4])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local data = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(data[1])
local ts = tonumber(data[2])
if tokens == nil then tokens = burst; ts = now end
tokens = math.min(burst, tokens + math.max(0, now - ts) * rate / 1000)
if tokens >= need then
  if consume == 1 then
    tokens = tokens - need
    redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ts', tostring(now))
    redis.call('PEXPIRE', KEYS[1], math.ceil(burst / rate * 1000) + 1000)
  end
  return {1, 0}
end
return {0, math.ceil((need - tokens) * 1000 / rate)}
"""


def token_buckets(buckets: list[tuple[str, float, int, bool]]) -> list[tuple[bool, int]]:
    """Several (key, rate, burst, consume) buckets in one pipelined round trip."""
    return [(bool(a), int(r)) for a, r in scripts_run([(TOKEN_BUCKET, [key], [rate, burst, 1, 1 if consume else 0])
                                                        for key, rate, burst, consume in buckets])]


def token_bucket(key: str, *, rate: float, burst: int, consume: bool) -> tuple[bool, int]:
    return token_buckets([(key, rate, burst, consume)])[0]


# --- relation cache (RCACHE-1 … RCACHE-10) -------------------------------------------------------
#
# Key: `<prefix>:rel:g<generation>:{<userId>|<relationBucket>}` -> Hash(videoId -> "state|version|gen").
# relationBucket = sha256-be64(seed "likes-rcache-v1", UTF-8 video id) mod RELATION_CACHE_BUCKETS (16):
# one user's cache is spread over at most 16 hashes (and slots), so a heavy user never makes one huge
# key, and a feed page of 20 videos is at most 16 HMGETs in one pipelined round trip. The hash tag
# holds the user and the bucket, never the generation or a bare video id (RCACHE-1).

RELATION_CACHE_SEED = "likes-rcache-v1"
RELATION_CACHE_BUCKETS = 16


def relation_bucket(video_id: str) -> int:
    from likes_project.hashing import HASH_SHA256_BE64, stable_hash

    return stable_hash(HASH_SHA256_BE64, RELATION_CACHE_SEED, video_id.encode("utf-8")) % RELATION_CACHE_BUCKETS


def relation_key(generation: int, user_id: int, video_id: str) -> str:
    return f"{_p()}:rel:g{generation}:{{{user_id}|{relation_bucket(video_id)}}}"


def relation_key_pattern() -> str:
    """Every relation-cache key (hashes, registry, sentinels, repair hints): for SCAN, never KEYS."""
    return f"{_p()}:rel:*"


def relation_generations_key() -> str:
    """Mirror of the durable CACHE_GENERATION statuses that the write script consults."""
    return f"{_p()}:rel:gens"


def relation_sentinel_keys(generation: int) -> list[str]:
    """Present while generation's cache content is intact; gone after a flush (loss detector). One
    per server of the cache role (node_tags): a Cluster node restarted empty loses its own."""
    return [tagged(f"{_p()}:rel:sentinel:g{generation}", tag) for tag in node_tags()]


def _relation_ttl_ms() -> int:
    base = settings.RELATION_CACHE_TTL_S * 1000
    return int(base * random.uniform(0.8, 1.2)) + 1


# KEYS[1] relation hash. ARGV: generation, video id, state, version, ttl ms. Returns 1 written, 0 refused
# (a higher version is cached). The generation check (-1: not live) is made by `relation_cache_write`
# before the script runs: the registry hashes to another slot than the relation keys (D93).
RELATION_WRITE = """
local cur = redis.call('HGET', KEYS[1], ARGV[2])
if cur then
  local v = tonumber(string.match(cur, '^[A-Z]+|(%d+)|'))
  if v and v > tonumber(ARGV[4]) then return 0 end
end
redis.call('HSET', KEYS[1], ARGV[2], ARGV[3] .. '|' .. ARGV[4] .. '|' .. ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return 1
"""


def relation_cache_write(generation: int, entries: list[tuple[int, str, str, int]]) -> list[int]:
    """Write (user_id, video_id, state, version) values of one generation through the script, in one
    pipelined round trip, when the registry names the generation live (ACTIVE, or building: SHADOW,
    BACKFILLING, CATCHING_UP, VERIFYING; see likes_project.generations); -1 for every entry otherwise.
    Returns the verdict for each (1 written, 0 a higher version is cached)."""
    from likes_project.generations.models import LIVE

    if not entries:
        return []
    status = cache_redis().hget(relation_generations_key(), str(generation))
    if status is None or status.decode() not in LIVE:
        # M15: an old generation's write refused; `floors_to_redis` counts likes_relcache_generation_refused_total.
        return [-1] * len(entries)
    return [int(r) for r in scripts_run([
        (RELATION_WRITE, [relation_key(generation, user_id, video_id)],
         [generation, video_id, state, version, _relation_ttl_ms()])
        for user_id, video_id, state, version in entries])]


def relation_read(generation: int, user_id: int, video_ids: list[str]) -> Read[dict[str, tuple[str, int]]]:
    """The cached (state, version) of each video, only values of `generation`: one HMGET per bucket hash."""
    by_key: dict[str, list[str]] = {}
    for vid in video_ids:
        by_key.setdefault(relation_key(generation, user_id, vid), []).append(vid)

    def queue(pipe) -> None:
        for key, vids in by_key.items():
            pipe.hmget(key, vids)

    def parse(replies: list) -> dict[str, tuple[str, int]]:
        found: dict[str, tuple[str, int]] = {}
        for vids, values in zip(by_key.values(), replies, strict=True):
            for vid, raw in zip(vids, values, strict=True):
                if raw is None:
                    continue
                state, version, gen = raw.decode().split("|")
                if int(gen) == generation:
                    found[vid] = (state, int(version))
        return found

    return Read(len(by_key), queue, parse)


def relation_cache_read(generation: int, user_id: int, video_ids: list[str]) -> dict[str, tuple[str, int]]:
    """`relation_read` in one round trip of its own."""
    return read_now(relation_read(generation, user_id, video_ids))


def relation_generations_mirror(statuses: dict[int, str], live_sentinels: list[int]) -> None:
    """Replace the Redis mirror of the durable generation statuses; (re)create the sentinels of the
    generations whose content is known to be intact."""
    hash_replace(relation_generations_key(), {str(g): s for g, s in statuses.items()})
    keys = [key for g in live_sentinels for key in relation_sentinel_keys(g)]
    if keys:
        pipe = cache_redis().pipeline(transaction=False)
        for key in keys:
            pipe.set(key, "1")
        pipe.execute()


def relation_sentinel_present(generation: int) -> bool:
    """Every server still holds the generation's sentinel."""
    keys = relation_sentinel_keys(generation)
    return int(cache_redis().exists(*keys)) == len(keys)


def relation_registry_present() -> bool:
    return bool(cache_redis().exists(relation_generations_key()))


# --- reader repair hints (RCACHE-4 step 5) --------------------------------------------------------
#
# A reader's misses go into one Redis set per user instead of one Celery message per read: the read
# that finds the set empty (and so creates it) is the only one that sends a message; every later read
# before the repair task takes the set only adds ids to it. The task takes the ids out (SPOP) before it
# repairs them, so a miss that lands after the take finds the set empty again and sends a new message:
# no hint is ever left in a set without a message on its way, except when that message was lost (the
# broker was down). The set's TTL, set once at creation, bounds that case: after it the next miss sends
# again. Hints are rebuildable (a later read misses again), so a dropped one costs latency, never
# correctness.


def relation_hints_key(user_id: int) -> str:
    return f"{_p()}:rel:hints:{{{user_id}}}"


# KEYS[1] the user's hint set. ARGV: ttl ms, cap, video ids... Returns 1 when the set was empty (the
# caller sends the one message), 0 otherwise. A full set takes nothing more (a message is already due).
RELATION_HINTS_ADD = """
local n = redis.call('SCARD', KEYS[1])
if n >= tonumber(ARGV[2]) then return 0 end
for i = 3, #ARGV do redis.call('SADD', KEYS[1], ARGV[i]) end
if n == 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  return 1
end
return 0
"""


def relation_hints_add(user_id: int, video_ids: list[str]) -> bool:
    """Add a reader's misses to the user's hint set; True when this call must send the repair message."""
    if not video_ids:
        return False
    cap = settings.RELATION_REPAIR_HINTS_MAX
    ttl_ms = int(settings.RELATION_REPAIR_HINT_TTL_S * 1000) + 1
    return bool(scripts_run([(RELATION_HINTS_ADD, [relation_hints_key(user_id)], [ttl_ms, cap, *video_ids[:cap]])])[0])


def relation_hints_take(user_id: int, limit: int) -> list[str]:
    """Take up to `limit` hinted video ids of the user out of the set (atomically: two takers never
    get the same id)."""
    taken = cache_redis().spop(relation_hints_key(user_id), limit) or []
    return sorted(v.decode() for v in taken)

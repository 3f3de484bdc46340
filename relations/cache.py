"""Redis key builders and Lua scripts for the relations app. Nothing else builds these keys.

Keys carry the deployment prefix and a Redis Cluster hash tag `{...}` around the part that must
stay on one slot.
"""

from __future__ import annotations

import functools
import json
import random

from django.conf import settings

from likes_project.redis_client import cache_redis


def _p() -> str:
    return settings.LIKES_REDIS_PREFIX


@functools.cache
def _script(source: str):
    # Registered once per process; each call passes the current client explicitly.
    return cache_redis().register_script(source)


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


def visibility_cache_get(video_id: str):
    """Return the cached snapshot dict (or {"missing": True}); None on a cache miss."""
    raw = cache_redis().get(visibility_key(video_id))
    if raw is None:
        return None
    _, _, body = raw.decode().partition("|")
    return json.loads(body)


def visibility_cache_put(video_id: str, version: int, snapshot: dict) -> None:
    _script(_VERSIONED_SET)(
        keys=[visibility_key(video_id)], args=[version, json.dumps(snapshot), _ttl_ms()], client=cache_redis()
    )


def edge_cache_get(author_id: int, user_id: int) -> dict | None:
    raw = cache_redis().get(edge_key(author_id, user_id))
    return None if raw is None else json.loads(raw)


def edge_cache_put(author_id: int, user_id: int, edges: dict) -> None:
    cache_redis().set(edge_key(author_id, user_id), json.dumps(edges), px=_ttl_ms())


def edge_cache_invalidate(a: int, b: int) -> None:
    cache_redis().delete(edge_key(a, b), edge_key(b, a))


# --- token buckets (CMD-18, RISK-1) -------------------------------------------------------------


def ratelimit_user_key(user_id: int) -> str:
    return f"{_p()}:rl:user:{{{user_id}}}"


def ratelimit_ip_key(ip: str) -> str:
    return f"{_p()}:rl:ip:{{{ip}}}"


def ratelimit_relation_key(user_id: int, video_id: str) -> str:
    return f"{_p()}:rl:rel:{{{user_id}}}:{video_id}"


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


def token_bucket(key: str, *, rate: float, burst: int, consume: bool) -> tuple[bool, int]:
    allowed, retry_ms = _script(TOKEN_BUCKET)(
        keys=[key], args=[rate, burst, 1, 1 if consume else 0], client=cache_redis()
    )
    return bool(allowed), int(retry_ms)

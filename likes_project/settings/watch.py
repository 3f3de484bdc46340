"""What the service watches for on its own (issue 32): hot spots and the bucket move that would relieve them, and
the convergence window each projection chain is held to (OBS-3). `base` takes these."""

from __future__ import annotations

from likes_project.settings.env import env_float, env_int

# Hot spots (counting.hotspots, M4, M11): a 10-second slot keeps this many hottest videos and users.
HOTSPOT_TRACK_MAX = env_int("HOTSPOT_TRACK_MAX", 1000)
# A count partition that took more than this share of the writes of the last 5 minutes (and at least
# HOTSPOT_MIN_WRITES of them) gets a suggested bucket move of at most HOTSPOT_MOVE_MAX_BUCKETS buckets.
HOTSPOT_MOVE_SUGGEST_SHARE = env_float("HOTSPOT_MOVE_SUGGEST_SHARE", 0.6)
HOTSPOT_MIN_WRITES = env_int("HOTSPOT_MIN_WRITES", 600)
HOTSPOT_MOVE_MAX_BUCKETS = env_int("HOTSPOT_MOVE_MAX_BUCKETS", 64)

# The convergence window (OBS-3): the oldest event a chain's consumer has not applied may be this old before the
# alert `LikesConvergenceWindowExceeded` fires; exported as `likes_convergence_window_seconds{consumer}` so the
# rule compares the two series and the number lives here only. The count chain and the who-liked index
# (reverse) are held apart (OBS-3: monitored separately).
CONVERGENCE_WINDOW_S = {
    "count": env_float("CONVERGENCE_WINDOW_COUNT_S", 30.0),
    "reverse": env_float("CONVERGENCE_WINDOW_REVERSE_S", 60.0),
    "relcache": env_float("CONVERGENCE_WINDOW_RELCACHE_S", 30.0),
}

# A bucket whose count moves by this much or more within one projector group is counted as an abnormal jump (M12,
# `likes_bucket_jumps_total`): never refused, only shown.
BUCKET_JUMP_ALERT = env_int("BUCKET_JUMP_ALERT", 100)

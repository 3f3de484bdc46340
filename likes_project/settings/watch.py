"""What the service watches for on its own (issue 32): the device bucket and the behaviour windows of risk control
(RISK-1), hot spots and the bucket move that would relieve them, and the convergence window each projection chain
is held to (OBS-3). `base` takes these."""

from __future__ import annotations

from likes_project.settings.env import env_bool, env_float, env_int

# Per device (the command's `deviceId`, or the `X-Device-Id` header): one phone behind many accounts (RISK-1).
RATE_LIMIT_DEVICE_RATE = env_float("RATE_LIMIT_DEVICE_RATE", 30.0)
RATE_LIMIT_DEVICE_BURST = env_int("RATE_LIMIT_DEVICE_BURST", 60)
# Behaviour windows (RISK-1 layer 2, issue 32 §1): past one, 429 `behaviour_limited` before the transaction. Off
# with RATE_LIMIT_ENABLED=false too.
BEHAVIOUR_LIMITS_ENABLED = env_bool("BEHAVIOUR_LIMITS_ENABLED", True)
BEHAVIOUR_TOGGLE_WINDOW_S = env_int("BEHAVIOUR_TOGGLE_WINDOW_S", 600)
BEHAVIOUR_TOGGLES_MAX = env_int("BEHAVIOUR_TOGGLES_MAX", 40)  # effective toggles of one relation per window
BEHAVIOUR_VIDEOS_PER_MINUTE_MAX = env_int("BEHAVIOUR_VIDEOS_PER_MINUTE_MAX", 120)  # distinct videos per user
BEHAVIOUR_DEVICES_PER_HOUR_MAX = env_int("BEHAVIOUR_DEVICES_PER_HOUR_MAX", 5)  # distinct devices per user

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

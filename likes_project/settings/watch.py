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

# The asynchronous risk scorer (consumer `risk`, counting.risk.scorer; RISK-1 layer 3, issue 32 §1). Each signal is
# named and has its threshold here; a signal that fires adds its weight; the sum picks the level.
RISK_SCORER_ENABLED = env_bool("RISK_SCORER_ENABLED", True)
RISK_YOUNG_ACCOUNT_S = env_int("RISK_YOUNG_ACCOUNT_S", 86400)  # signal young_account: joined less than this ago
RISK_BURST_LIKES_PER_MINUTE = env_int("RISK_BURST_LIKES_PER_MINUTE", 60)  # signal burst: likes in one minute
RISK_RING_MIN_ACCOUNTS = env_int("RISK_RING_MIN_ACCOUNTS", 5)  # signal ring: accounts seen on one device
RISK_RING_WINDOW_S = env_int("RISK_RING_WINDOW_S", 86400)  # how long a device remembers its accounts
RISK_FRESH_UPLOAD_S = env_int("RISK_FRESH_UPLOAD_S", 10)  # signal fresh_upload: a like this soon after publication
RISK_SIGNAL_WEIGHTS = {"young_account": env_int("RISK_WEIGHT_YOUNG_ACCOUNT", 1),
                       "burst": env_int("RISK_WEIGHT_BURST", 2),
                       "ring": env_int("RISK_WEIGHT_RING", 3),
                       "fresh_upload": env_int("RISK_WEIGHT_FRESH_UPLOAD", 1)}
RISK_DOWNWEIGHT_SCORE = env_int("RISK_DOWNWEIGHT_SCORE", 3)
RISK_FREEZE_SCORE = env_int("RISK_FREEZE_SCORE", 5)
# A ring bigger than this waits for a second person's approval instead of applying on its own.
RISK_AUTO_MAX_USERS = env_int("RISK_AUTO_MAX_USERS", 20)

"""Settings shared by every environment. Everything tunable comes from the environment
(architecture §9); `.env.example` documents each variable."""

from __future__ import annotations

import os
from pathlib import Path

from likes_project.settings.databases import build_databases
from likes_project.settings.env import env_bool, env_float, env_int, env_list, file_storage

BASE_DIR = Path(__file__).resolve().parent.parent.parent


# Public development-only values: `likes_project.settings.guards` refuses every one of them whenever
# DEBUG is false, and production settings refuse to start without the real ones (issue 10 §2).
DEV_SECRET_KEY = "dev-only-insecure-key-change-me"
DEV_VIDEO_SERVICE_TOKEN = "dev-video-service-token"
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", DEV_SECRET_KEY)
DEBUG = env_bool("DJANGO_DEBUG", False)
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS")

# Behind a TLS-terminating proxy (the usual deployment): the proxy's scheme header, e.g.
# DJANGO_SECURE_PROXY_SSL_HEADER=X-Forwarded-Proto:https; the origins admin POSTs come from, e.g.
# CSRF_TRUSTED_ORIGINS=https://likes-admin.example.com; the redirect to https stays off by default
# because TLS usually ends at the proxy.
_proxy_ssl = os.environ.get("DJANGO_SECURE_PROXY_SSL_HEADER", "").strip()
SECURE_PROXY_SSL_HEADER = (
    ("HTTP_" + _proxy_ssl.partition(":")[0].strip().upper().replace("-", "_"), _proxy_ssl.partition(":")[2].strip())
    if _proxy_ssl else None
)
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS")
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", False)

INSTALLED_APPS = [
    "opsconsole.apps.ConsoleAdminConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_celery_beat",
    "pgtrigger",
    "likes_project.audit",
    "likes_project.opsjobs",
    "likes_project.eventlog",
    "relations",
    "counting",
    "counting.risk.apps.RiskConfig",
    "counting.notifications.apps.NotificationsConfig",
    "counting.features.apps.FeaturesConfig",
    "likes_project.subscriptions.apps.SubscriptionsConfig",
    "reconciliation",
    "opsconsole",
]

from likes_project.settings.middleware import API_MIDDLEWARE, MIDDLEWARE  # noqa: E402, F401

API_LEAN_MIDDLEWARE = env_bool("API_LEAN_MIDDLEWARE", True)  # false: the API goes through MIDDLEWARE too
# A connection used less than this long ago skips the per-request `SELECT 1` health check (D137); 0: always check.
DB_HEALTH_CHECK_IDLE_S = env_float("DB_HEALTH_CHECK_IDLE_S", 2.0)

ROOT_URLCONF = "likes_project.urls"
WSGI_APPLICATION = "likes_project.wsgi.application"
APPEND_SLASH = False

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "likes_project" / "templates"],  # the core's admin kit
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES, RELATION_SHARD_ALIASES, COUNT_PARTITION_ALIASES = build_databases(os.environ)
DATABASE_ROUTERS = ["likes_project.db_routers.AliasFamilyRouter"]
# Each write service opens its own durable transaction (house style).
ATOMIC_REQUESTS = False
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True
STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / ".data" / "static"
STATICFILES_DIRS = [BASE_DIR / "clients" / "browser"]  # /static/likes-client.js, the browser client (issue 30)
# /demo/feed, hearts and counts through the browser client: off unless asked for (the dev settings turn it on).
DEMO_FEED_ENABLED = env_bool("DEMO_FEED_ENABLED", False)

# --- Redis -------------------------------------------------------------------------------------
REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
REDIS_STREAMS_URL = os.environ.get("REDIS_STREAMS_URL", REDIS_URL)
LIKES_REDIS_PREFIX = os.environ.get("LIKES_REDIS_PREFIX", "likes")
# Redis socket timeout sits below the DB statement timeout (consistency-techniques S3).
REDIS_SOCKET_TIMEOUT_S = env_float("REDIS_SOCKET_TIMEOUT_S", 0.5)
STREAM_PARTITIONS = env_int("STREAM_PARTITIONS", 8)
# Both Redis roles are django-redis cache entries (`default` = cache role, `streams` = event log); code
# takes their raw clients from likes_project.redis_client (issue 10 §7, decision D52).
from likes_project.redis_client import is_cluster_url, redis_caches  # noqa: E402

CACHES = redis_caches(cache_url=REDIS_URL, streams_url=REDIS_STREAMS_URL, timeout_s=REDIS_SOCKET_TIMEOUT_S,
                      prefix=LIKES_REDIS_PREFIX)
DJANGO_REDIS_CONNECTION_FACTORY = "likes_project.redis_client.RoleConnectionFactory"

# --- Celery ------------------------------------------------------------------------------------
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", REDIS_STREAMS_URL)
if is_cluster_url(CELERY_BROKER_URL):
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured("CELERY_BROKER_URL names a Redis Cluster, which Celery's Redis transport does not "
                               "speak: point it at a plain Redis (REDIS_STREAMS_URL is a Cluster, so set it apart)")
CELERY_RESULT_BACKEND = None
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# Celery's Django fixup closes every database connection before and after every task unless this is set:
# each projector pass then connected anew to every database it touched (a server backend forked per
# connection). With it, connections live as CONN_MAX_AGE says (checked before each task, D91).
CELERY_DB_REUSE_MAX = env_int("CELERY_DB_REUSE_MAX", 1_000_000)
CELERY_TASK_SOFT_TIME_LIMIT = env_int("CELERY_TASK_SOFT_TIME_LIMIT", 50)
CELERY_TASK_TIME_LIMIT = env_int("CELERY_TASK_TIME_LIMIT", 60)
# Bounded waits on the broker (issue 9 §4): connecting gives up after 1 s, a socket operation after 5 s
# (above the worker's 1 s BRPOP poll); nudges are sent off the request path (`likes_project.nudge`).
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 300, "socket_connect_timeout": 1.0, "socket_timeout": 5.0}
CELERY_BROKER_CONNECTION_TIMEOUT = 1.0
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
CELERY_TIMEZONE = "UTC"
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Worker and beat keep our LOGGING (structured lines) instead of replacing the root logger's handlers.
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
# One queue per job family (consistency-techniques B2), so a backlog in one never starves another.
CELERY_TASK_ROUTES = {
    "relations.publish_*": {"queue": "publish"},
    "relations.republish_lost": {"queue": "maintenance"},
    "relations.archive_outbox": {"queue": "maintenance"},
    "relations.relcache_check_loss": {"queue": "maintenance"},
    "relations.relcache_sample_check": {"queue": "maintenance"},
    "relations.command_retention": {"queue": "maintenance"},
    "relations.account_erasures_resume": {"queue": "maintenance"},
    "relations.relcache_repair": {"queue": "relcache"},
    "relations.project_relcache*": {"queue": "relcache"},
    "counting.project_reverse*": {"queue": "reverse"},
    "notifications.*": {"queue": "notify"},  # its own queue: counts go first under a backlog (DEG-2)
    "riskscore.*": {"queue": "risk"},  # the risk scorer (issue 32 §1): likewise
    "subscriptions.*": {"queue": "maintenance"},
    "features.*": {"queue": "maintenance"},
    "retention.*": {"queue": "maintenance"},
    "counting.retire_deleted_videos": {"queue": "maintenance"},
    "counting.project_*": {"queue": "count"},
    "counting.display_snapshot": {"queue": "snapshot"},
    "counting.count_cache_check_loss": {"queue": "maintenance"},
    "counting.bucket_migrations_cleanup": {"queue": "maintenance"},
    "relations.slot_moves_cleanup": {"queue": "maintenance"},
    "opsjobs.run*": {"queue": "ops"},
    "opsjobs.sweep": {"queue": "maintenance"},
    "eventlog.redrive": {"queue": "maintenance"},
    "observability.refresh_gauges": {"queue": "maintenance"},
    "opsconsole.gauge_history_sample": {"queue": "maintenance"},
    "reconciliation.*": {"queue": "maintenance"},
    "audit.*": {"queue": "maintenance"},
}
# After-commit nudges of the publisher/projector (latency only; beat sweepers guarantee progress).
LIKES_NUDGE_ENABLED = env_bool("LIKES_NUDGE_ENABLED", True)
# A burst of nudges of one task and argument costs one send per window, plus one at its end (D86).
NUDGE_DEBOUNCE_S = env_float("NUDGE_DEBOUNCE_S", 0.2)
# At most one nudged copy of a (task, args) waits in the broker; its flag expires after this long if the
# task is lost (D89). 0 turns the coalescing off.
NUDGE_PENDING_TTL_S = env_float("NUDGE_PENDING_TTL_S", 5.0)
# Retries of infrastructure failures (consumers and the outbox publisher, issue 9 §1): doubling from
# LIKES_RETRY_BASE_S up to LIKES_RETRY_MAX_BACKOFF_S, with jitter, forever; an ALERT is logged (and
# `likes_*_retry_alerts_total` counted) once a head has failed LIKES_RETRY_ALERT_AFTER times.
LIKES_RETRY_BASE_S = env_float("LIKES_RETRY_BASE_S", 0.5)
LIKES_RETRY_MAX_BACKOFF_S = env_float("LIKES_RETRY_MAX_BACKOFF_S", 30.0)
LIKES_RETRY_ALERT_AFTER = env_int("LIKES_RETRY_ALERT_AFTER", 10)
REDRIVE_LEASE_S = env_float("REDRIVE_LEASE_S", 30.0)  # a dead-letter redrive holds its partition's lease
# A consumer pass holds its partition's lease this long, renewed after every batch: a killed worker's
# partitions wait out at most this much before another worker takes them over.
CONSUMER_LEASE_TTL_S = env_float("CONSUMER_LEASE_TTL_S", 30.0)
# Pass groups (issue 34 §2, D143): the consumers of a group run in one task, in this order, one pass each over a
# partition from one stream read; the first one's pass task runs them (on its queue). `;` between groups, `,`
# between consumers; a consumer in no group runs alone. Empty: every consumer alone, as before. The default keeps
# the notifications and the risk scorer out of the counts' task and queue (DEG-2).
CONSUMER_PASS_GROUPS = tuple(tuple(n.strip() for n in group.split(",") if n.strip())
                             for group in os.environ.get("CONSUMER_PASS_GROUPS", "count,relcache,reverse;notify,risk")
                             .split(";") if group.strip())
# Runtime switches (issue 14 §3, likes_project/switches.py): every process re-reads them at most this often,
# so a change takes effect everywhere within SWITCH_CACHE_S (at once in the process that made it). A like
# command refused by read-only mode says Retry-After READ_ONLY_RETRY_AFTER_S.
SWITCH_CACHE_S = env_float("SWITCH_CACHE_S", 5.0)
READ_ONLY_RETRY_AFTER_S = env_int("READ_ONLY_RETRY_AFTER_S", 30)
# /metrics (issue 10, D45/D46): `Authorization: Bearer $METRICS_TOKEN` unless METRICS_PUBLIC (then open to
# anyone who reaches it); the token also shows /readyz's per-check detail. The store gauges are computed
# by the beat job `observability.refresh_gauges` every METRICS_GAUGES_EVERY_S; scrapes read the result.
METRICS_TOKEN = os.environ.get("METRICS_TOKEN", "")
METRICS_PUBLIC = env_bool("METRICS_PUBLIC", False)
METRICS_GAUGES_EVERY_S = env_float("METRICS_GAUGES_EVERY_S", 15.0)
# The console's front page charts the last hour of those gauges: a copy of them every minute, kept this long.
CONSOLE_HISTORY_KEEP_S = env_float("CONSOLE_HISTORY_KEEP_S", 7200.0)
# Beat sweepers (schedules live in code; the DatabaseScheduler syncs them into its tables).
CELERY_BEAT_SCHEDULE = {name: {"task": task, "schedule": every_s} for name, task, every_s in (
    ("publish-outbox",            "relations.publish_all",           1.0),
    ("project-counts",            "counting.project_all",            1.0),
    ("display-snapshot",          "counting.display_snapshot",       1.0),
    ("republish-lost-events",     "relations.republish_lost",        10.0),
    ("archive-outbox",            "relations.archive_outbox",        300.0),
    ("project-relation-cache",    "relations.project_relcache_all",  1.0),
    ("relation-cache-loss-check", "relations.relcache_check_loss",   5.0),
    ("relation-cache-sampler",    "relations.relcache_sample_check", 60.0),
    ("command-retention",         "relations.command_retention",     3600.0),
    ("count-cache-loss-check",    "counting.count_cache_check_loss", 10.0),
    ("project-reverse-index",     "counting.project_reverse_all",    1.0),
    ("retire-deleted-videos",     "counting.retire_deleted_videos",  600.0),
    ("ops-jobs-sweep",            "opsjobs.sweep",                   5.0),
    ("redrive-dead-letters",      "eventlog.redrive",                10.0),
    ("metrics-gauges",            "observability.refresh_gauges",    METRICS_GAUGES_EVERY_S),
    ("console-gauge-history",     "opsconsole.gauge_history_sample", 60.0),
    # The check schedule (REC-8, reconciliation.schedule): each entry starts a run as an ops job.
    ("reconcile-identity-recent",   "reconciliation.identity_recent",   60.0),
    ("reconcile-coverage-recent",   "reconciliation.coverage_recent",   300.0),
    ("reconcile-coverage-rotating", "reconciliation.coverage_rotating", 600.0),
    ("reconcile-exact-hot",         "reconciliation.exact_hot",         86400.0),
    ("audit-chain-checkpoint",      "audit.chain_checkpoint",           3600.0),  # D80
)}

# --- API ---------------------------------------------------------------------------------------
REST_FRAMEWORK = {
    # Token first: its `WWW-Authenticate` header makes an anonymous call a 401, not a 403.
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "relations.api.auth.UserTokenAuthentication",  # DRF's TokenAuthentication in one raw statement
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"],  # what the endpoints read; OPTIONS says so
    "DEFAULT_RENDERER_CLASSES": [
        "rest_framework.renderers.JSONRenderer",
        "rest_framework.renderers.BrowsableAPIRenderer",
    ],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "likes_project.api_exceptions.exception_handler",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Like service API",
    "DESCRIPTION": "Like / unlike / like-count service for a short-video platform.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    # The public document leaves out the video service's /internal/ endpoints (likes_project.schema).
    "PREPROCESSING_HOOKS": ["likes_project.schema.public_endpoints"],
    "COMPONENT_SPLIT_REQUEST": True,
    # Self-contained docs assets: the interactive docs never reach a CDN.
    "ENUM_NAME_OVERRIDES": {"RelationStateEnum": ["LIKED", "UNLIKED"]},
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

# Largest accepted request body on the API (bytes); larger answers 413 `payload_too_large`.
API_MAX_BODY_BYTES = env_int("API_MAX_BODY_BYTES", 16 * 1024)
DATA_UPLOAD_MAX_MEMORY_SIZE = 2 * 1024 * 1024

# --- Like command ------------------------------------------------------------------------------
# `reject` answers 409 stale_base_version; `last_commit_wins` applies the command anyway (CMD-9).
LIKE_STALE_BASE_POLICY = os.environ.get("LIKE_STALE_BASE_POLICY", "reject")
# How the command's transaction runs (D84): `function`, one round trip to the shard's likes_relation_apply
# (the default), or `python`, the statement-by-statement reference it is tested against.
LIKE_COMMAND_WRITE_PATH = os.environ.get("LIKE_COMMAND_WRITE_PATH", "function")
if LIKE_COMMAND_WRITE_PATH not in ("function", "python"):
    raise ValueError(f"LIKE_COMMAND_WRITE_PATH must be 'function' or 'python', not {LIKE_COMMAND_WRITE_PATH!r}")
VIDEO_SERVICE_TOKEN = os.environ.get("VIDEO_SERVICE_TOKEN", "")
VISIBILITY_CACHE_TTL_S = env_float("VISIBILITY_CACHE_TTL_S", 5.0)
# Per process, the author of up to this many videos, so a video's (author, caller) edges are read in the
# same Redis round trip as its snapshot (D87; a guess the snapshot checks). 0 turns the guesses off.
AUTHOR_HINTS_MAX = env_int("AUTHOR_HINTS_MAX", 100_000)

# Token buckets (CMD-18 / RISK-1). Rates are tokens per second; burst is the bucket size.
RATE_LIMIT_USER_RATE = env_float("RATE_LIMIT_USER_RATE", 30.0)
RATE_LIMIT_USER_BURST = env_int("RATE_LIMIT_USER_BURST", 60)
RATE_LIMIT_IP_RATE = env_float("RATE_LIMIT_IP_RATE", 300.0)
RATE_LIMIT_IP_BURST = env_int("RATE_LIMIT_IP_BURST", 600)
RATE_LIMIT_RELATION_PER_MINUTE = env_int("RATE_LIMIT_RELATION_PER_MINUTE", 20)
# The device bucket and the behaviour windows (issue 32 §1): settings/watch.py.
RATE_LIMIT_ENABLED = env_bool("RATE_LIMIT_ENABLED", True)

# Only behind a proxy that overwrites X-Forwarded-For may the per-IP limit trust it.
TRUST_X_FORWARDED_FOR = env_bool("TRUST_X_FORWARDED_FOR", False)
# The per-IP limit's client address (relations.api.views.client_ip): behind N proxies that each append
# to X-Forwarded-For, the N-th entry from the right (the leftmost is whatever the client sent); 0
# ignores the header (REMOTE_ADDR). Unset: 1 when TRUST_X_FORWARDED_FOR is true, else 0.
TRUSTED_PROXY_COUNT = int(os.environ["TRUSTED_PROXY_COUNT"]) if os.environ.get("TRUSTED_PROXY_COUNT") else None

# --- relation cache and batch query -------------------------------------------------------------
RELATION_CACHE_TTL_S = env_int("RELATION_CACHE_TTL_S", 24 * 3600)
BATCH_QUERY_MAX_IDS = env_int("BATCH_QUERY_MAX_IDS", 100)
# Database fallback reads (Redis down or bypassed) allowed at once per process (DEG-1 step 4).
DB_FALLBACK_CONCURRENCY = env_int("DB_FALLBACK_CONCURRENCY", 32)
RELATION_CACHE_SAMPLE_SIZE = env_int("RELATION_CACHE_SAMPLE_SIZE", 200)
# How long a rebuild's sample check waits for a relation its cache lacks (the projector may not be there yet, D147).
RELATION_CACHE_VERIFY_SETTLE_S = env_float("RELATION_CACHE_VERIFY_SETTLE_S", 10.0)
# Reader repair hints are coalesced per user in a Redis set (relations.cache.relation_hints_add): at
# most this many ids wait per user, and a set whose message was lost expires after the TTL.
RELATION_REPAIR_HINTS_MAX = env_int("RELATION_REPAIR_HINTS_MAX", 1000)
RELATION_REPAIR_HINT_TTL_S = env_float("RELATION_REPAIR_HINT_TTL_S", 30.0)
# No-op command rows (LIKE_COMMAND with changed = false) are deleted after this many hours (CMD-15,
# E-2): it must exceed the longest client retry window, since a deleted row no longer dedupes a retry.
# Rows that changed a relation are kept (they are the evidence of each version).
RELATION_COMMAND_RETENTION_HOURS = env_int("RELATION_COMMAND_RETENTION_HOURS", 7 * 24)
RELATION_COMMAND_RETENTION_BATCH = env_int("RELATION_COMMAND_RETENTION_BATCH", 1000)  # rows per transaction
RELATION_COMMAND_RETENTION_MAX_BATCHES = env_int("RELATION_COMMAND_RETENTION_MAX_BATCHES", 50)  # per shard per beat run

# My liked list (LIST): page size cap and raw rows scanned per request before answering (LIST-6).
MY_LIKES_MAX_LIMIT = env_int("MY_LIKES_MAX_LIMIT", 100)
MY_LIKES_SCAN_LIMIT = env_int("MY_LIKES_SCAN_LIMIT", 1000)
LIKES_EXPORT_CHUNK_ROWS = env_int("LIKES_EXPORT_CHUNK_ROWS", 1000)

# --- count cache and its in-process L1 (CCACHE, QRY-6) ------------------------------------------
COUNT_CACHE_GENERATION_REFRESH_S = env_float("COUNT_CACHE_GENERATION_REFRESH_S", 2.0)
COUNT_L1_TTL_S = env_float("COUNT_L1_TTL_S", 0.25)  # 0 turns the L1 off (D90: part of commit -> displayCount)
COUNT_L1_MAX_ENTRIES = env_int("COUNT_L1_MAX_ENTRIES", 10000)
COUNT_L1_STALE_S = env_float("COUNT_L1_STALE_S", 5.0)
COUNT_DB_FALLBACK_WAIT_S = env_float("COUNT_DB_FALLBACK_WAIT_S", 0.5)
COUNT_CACHE_REBUILD_BATCH = env_int("COUNT_CACHE_REBUILD_BATCH", 2000)
COUNT_CACHE_REBUILD_SAMPLE = env_int("COUNT_CACHE_REBUILD_SAMPLE", 200)
COUNT_CACHE_REBUILD_CATCHUP_SLACK_S = env_float("COUNT_CACHE_REBUILD_CATCHUP_SLACK_S", 60.0)
COUNT_CACHE_VERIFY_IN_FLIGHT_S = env_float("COUNT_CACHE_VERIFY_IN_FLIGHT_S", 2.0)

# --- ops jobs and the generation lifecycle ----------------------------------------------------------
# A job runs in slices of at most OPS_JOB_SLICE_S on the `ops` queue, well below the Celery soft time
# limit (a slice must never be killed by it), persisting its cursor after every chunk. A slice renews its
# lease after every chunk; a holder silent for OPS_JOB_LEASE_S is dead and the sweeper fails its job.
OPS_JOB_SLICE_S = env_float("OPS_JOB_SLICE_S", 20.0)
OPS_JOB_LEASE_S = env_float("OPS_JOB_LEASE_S", 60.0)
OPS_JOB_RENUDGE_S = env_float("OPS_JOB_RENUDGE_S", 5.0)
ACCOUNT_DELETE_CHUNK = env_int("ACCOUNT_DELETE_CHUNK", 100)  # withdrawals between two progress saves
GENERATION_THROTTLE_S = env_float("GENERATION_THROTTLE_S", 0.0)  # pause between rebuild chunks (load)
# Files a job produces (exports), served to operators from the job's admin page.
OPS_JOB_FILES_DIR = os.environ.get("OPS_JOB_FILES_DIR", str(BASE_DIR / ".data" / "job-files"))

# --- count projection -----------------------------------------------------------------------------
COUNT_VIRTUAL_BUCKETS = env_int("COUNT_VIRTUAL_BUCKETS", 1024)  # V of bucket space v1, used once at bootstrap
# The count partitions the first manifest (and the first reverse-index generation) is sealed over, once,
# at bootstrap (issue 13 §1); default every configured one. A partition configured later holds no routes
# until a bucket migration moves buckets onto it.
COUNT_BOOTSTRAP_PARTITIONS = env_list("COUNT_BOOTSTRAP_PARTITIONS") or list(COUNT_PARTITION_ALIASES)
COUNT_PROJECTOR_BATCH = env_int("COUNT_PROJECTOR_BATCH", 500)
COUNT_SNAPSHOT_BATCH = env_int("COUNT_SNAPSHOT_BATCH", 2000)
# One display snapshot run at a time (a lease); a holder silent this long is taken over.
COUNT_SNAPSHOT_LEASE_S = env_float("COUNT_SNAPSHOT_LEASE_S", 30.0)
# A video whose buckets changed at least this often since its last snapshot, or that took at least
# COUNT_HOT_WRITES_PER_MINUTE writes in the last minute (the hot-spot figures), is hot: it is refreshed
# at most every COUNT_HOT_REFRESH_S (spec §8.6, DEG-2); others on every snapshot run.
COUNT_HOT_DIRTY_THRESHOLD = env_int("COUNT_HOT_DIRTY_THRESHOLD", 50)
COUNT_HOT_WRITES_PER_MINUTE = env_int("COUNT_HOT_WRITES_PER_MINUTE", 600)
COUNT_HOT_REFRESH_S = env_float("COUNT_HOT_REFRESH_S", 1.0)
# Commit -> applied beyond this is logged and counted (likes_projection_over_target_total).
COUNT_CONVERGENCE_TARGET_S = env_float("COUNT_CONVERGENCE_TARGET_S", 2.0)
# Retirement of deleted videos (issue 9 §4): deleted videos worked on per run, and how long after a
# deletion a change concerning the video may still commit (the visibility cache's TTL, the longest
# transaction); only then are the stream heads taken as the video's fence.
RETIRE_BATCH_VIDEOS = env_int("RETIRE_BATCH_VIDEOS", 500)
RETIRE_SETTLE_S = env_float("RETIRE_SETTLE_S", 60.0)
OUTBOX_PUBLISH_BATCH = env_int("OUTBOX_PUBLISH_BATCH", 500)
OUTBOX_CLAIM_TTL_S = env_int("OUTBOX_CLAIM_TTL_S", 60)
OUTBOX_RETENTION_HOURS = env_int("OUTBOX_RETENTION_HOURS", 72)
# A SENT row above the lowest checkpoint whose entry the log no longer holds (a flush, a failover)
# is republished once it is this old; the check runs every 10 s, so a lost tail heals in ~20 s.
OUTBOX_REPUBLISH_AFTER_S = env_int("OUTBOX_REPUBLISH_AFTER_S", 10)
# A partition's first check looks back this far, not only above the consumers' checkpoints (which a
# flush before that first check has already carried past the lost entries).
OUTBOX_LOST_TAIL_LOOKBACK_S = env_int("OUTBOX_LOST_TAIL_LOOKBACK_S", 900)

# --- reconciliation and repair (issue 11) ----------------------------------------------------------
# Exact mode's write barrier: a command meeting it waits up to RECONCILE_BARRIER_MAX_MS, then gets 503
# `write_barrier`; raising it waits at most RECONCILE_BARRIER_ACQUIRE_MS per shard for the commands in
# flight; a scope of more videos than RECONCILE_BARRIER_VIDEO_LOCKS_MAX takes the shard-wide key. The
# outbox and the count consumer must reach the barrier within RECONCILE_DRAIN_MAX_S, else REFUSED.
RECONCILE_BARRIER_MAX_MS = env_int("RECONCILE_BARRIER_MAX_MS", 2000)
RECONCILE_BARRIER_ACQUIRE_MS = env_int("RECONCILE_BARRIER_ACQUIRE_MS", 1000)
RECONCILE_BARRIER_VIDEO_LOCKS_MAX = env_int("RECONCILE_BARRIER_VIDEO_LOCKS_MAX", 256)
RECONCILE_DRAIN_MAX_S = env_float("RECONCILE_DRAIN_MAX_S", 10.0)
# Coverage: an uncovered relation is waited for (its event may be in flight) up to this long before it
# is judged.
RECONCILE_COVERAGE_SETTLE_S = env_float("RECONCILE_COVERAGE_SETTLE_S", 5.0)
RECONCILE_BATCH_VIDEOS = env_int("RECONCILE_BATCH_VIDEOS", 200)  # videos per chunk of a run
# The schedule (REC-8): recently changed videos are those whose display snapshot moved in the window.
RECONCILE_RECENT_WINDOW_S = env_int("RECONCILE_RECENT_WINDOW_S", 600)
RECONCILE_RECENT_LIMIT = env_int("RECONCILE_RECENT_LIMIT", 2000)
RECONCILE_ROTATING_VIDEOS_PER_RUN = env_int("RECONCILE_ROTATING_VIDEOS_PER_RUN", 5000)
# The daily exact check's videos: the hottest by displayed count (REC-8), each under a short write barrier.
RECONCILE_EXACT_HOT_LIMIT = env_int("RECONCILE_EXACT_HOT_LIMIT", 100)

# --- recovery snapshots (issue 12, reconciliation.services.recovery) ---------------------------------
# Artifacts go to the storage alias "recovery_snapshots": a local directory by default; with
# SNAPSHOT_STORAGE_BACKEND=s3 an S3-compatible bucket through django-storages (AWS_* settings below).
SNAPSHOT_STORAGE_DIR = os.environ.get("SNAPSHOT_STORAGE_DIR", str(BASE_DIR / ".data" / "snapshots"))
SNAPSHOT_STORAGE_BACKEND = os.environ.get("SNAPSHOT_STORAGE_BACKEND", "filesystem")
SNAPSHOT_INTERVAL_S = env_float("SNAPSHOT_INTERVAL_S", 6 * 3600.0)  # the beat's snapshot
SNAPSHOT_TEST_RESTORE_INTERVAL_S = env_float("SNAPSHOT_TEST_RESTORE_INTERVAL_S", 24 * 3600.0)
SNAPSHOT_KEEP = env_int("SNAPSHOT_KEEP", 3)  # sealed snapshots kept (older ones expire)
# A cut that aborted (a lease changed hands, a receipt beyond it) is retried as a new snapshot this often.
SNAPSHOT_ABORT_RETRIES = env_int("SNAPSHOT_ABORT_RETRIES", 3)
# Rows per COPY chunk read or written while streaming an artifact (memory stays bounded).
SNAPSHOT_STREAM_CHUNK = env_int("SNAPSHOT_STREAM_CHUNK", 1 << 16)
# The replay of a restore catches up online until it is this many entries behind, then fences.
SNAPSHOT_REPLAY_FENCE_LAG = env_int("SNAPSHOT_REPLAY_FENCE_LAG", 500)
# A restore runs on the generation lifecycle (renewed lease, reclaim); past this many seconds from its start it is
# FAILED and the reads stay where they were (issue 29 §6).
RESTORE_TIME_LIMIT_S = env_float("RESTORE_TIME_LIMIT_S", 7200.0)
# A replaced count projection generation stays readable this long, then its rows are dropped.
COUNT_GENERATION_OBSERVATION_S = env_float("COUNT_GENERATION_OBSERVATION_S", 24 * 3600.0)

# --- virtual-bucket migration (issue 13, counting.services.migration) --------------------------------
BUCKET_MIGRATION_COPY_CHUNK = env_int("BUCKET_MIGRATION_COPY_CHUNK", 5000)  # rows per copy / replay statement
# The catch-up replays the change log until a pass finds at most this many changed rows, then cuts over.
BUCKET_MIGRATION_CUTOVER_LAG = env_int("BUCKET_MIGRATION_CUTOVER_LAG", 2000)
BUCKET_MIGRATION_CATCHUP_PASSES = env_int("BUCKET_MIGRATION_CATCHUP_PASSES", 20)  # then cut over anyway
# MIG-5: the source's read-only copy is kept this long after VERIFY passed, then deleted.
BUCKET_MIGRATION_RETENTION_S = env_float("BUCKET_MIGRATION_RETENTION_S", 24 * 3600.0)
# Both ledgers: a step a store refused runs again after the wait, that many times in a row (D131).
LEDGER_TRANSIENT_WAIT_S = env_float("LEDGER_TRANSIENT_WAIT_S", 5.0)
LEDGER_TRANSIENT_RETRIES = env_int("LEDGER_TRANSIENT_RETRIES", 60)

# --- relation slot moves (issue 16 §3, relations.services.slot_moves) ---------------------------------
# Contract v1 spreads its 256 logical slots over these relation shards (default: every configured one); a shard
# configured beyond them starts empty and receives slots by a move.
RELATION_CONTRACT_SHARDS = env_list("RELATION_CONTRACT_SHARDS") or list(RELATION_SHARD_ALIASES)
# Every process reloads the active contract this often (a slot move's switch); a write learns it at once (`moved`).
RELATION_CONTRACT_REFRESH_S = env_float("RELATION_CONTRACT_REFRESH_S", 1.0)
# A command of a moving slot waits at most this long at the cutover, then gets 503 `write_barrier`.
RELATION_MOVE_MAX_PAUSE_MS = env_int("RELATION_MOVE_MAX_PAUSE_MS", 2000)
RELATION_MOVE_COPY_CHUNK = env_int("RELATION_MOVE_COPY_CHUNK", 5000)  # source ids scanned per copy statement
# The catch-up applies captured changes until a pass applies at most this many, then cuts over.
RELATION_MOVE_CUTOVER_LAG = env_int("RELATION_MOVE_CUTOVER_LAG", 500)
RELATION_MOVE_CATCHUP_PASSES = env_int("RELATION_MOVE_CATCHUP_PASSES", 20)  # then cut over anyway
# The cutover waits this long for the slots' commands in flight (their exclusive locks), else it retries later.
RELATION_MOVE_LOCK_TIMEOUT_MS = env_int("RELATION_MOVE_LOCK_TIMEOUT_MS", 1000)
# The source's rows of the moved slots are kept this long after VERIFY passed, then deleted.
RELATION_MOVE_RETENTION_S = env_float("RELATION_MOVE_RETENTION_S", 24 * 3600.0)

_SNAPSHOT_STORAGE = file_storage(SNAPSHOT_STORAGE_BACKEND, env_prefix="SNAPSHOT", s3_location="recovery-snapshots",
                                 directory=SNAPSHOT_STORAGE_DIR, overwrite=False)
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    "recovery_snapshots": _SNAPSHOT_STORAGE,
}
# The snapshot schedule: a snapshot every SNAPSHOT_INTERVAL_S (retention applied after it), a test-restore
# of the latest sealed one into a scratch generation, and the drop of replaced generations' rows.
CELERY_BEAT_SCHEDULE.update({name: {"task": task, "schedule": every_s} for name, task, every_s in (
    ("recovery-snapshot",              "reconciliation.snapshot_scheduled",     SNAPSHOT_INTERVAL_S),
    ("recovery-snapshot-test-restore", "reconciliation.snapshot_test_restore",  SNAPSHOT_TEST_RESTORE_INTERVAL_S),
    ("drop-retired-generations",       "reconciliation.drop_retired_generations", 3600.0),
    ("bucket-migration-cleanup",       "counting.bucket_migrations_cleanup",    600.0),
    ("relation-slot-move-cleanup",     "relations.slot_moves_cleanup",          600.0),
)})
# Subscriptions, creator notifications, the feature export and retention (issue 31): settings/downstream.py.
from likes_project.settings.downstream import *  # noqa: E402, F403
from likes_project.settings.downstream import DOWNSTREAM_BEAT  # noqa: E402

# Hot spots and convergence windows (issue 32): settings/watch.py.
from likes_project.settings.watch import *  # noqa: E402, F403

CELERY_BEAT_SCHEDULE.update({name: {"task": task, "schedule": every_s} for name, task, every_s in DOWNSTREAM_BEAT})
STORAGES["feature_exports"] = FEATURE_EXPORT_STORAGE  # noqa: F405


# A key of its own (production requires it): rotating SECRET_KEY must not invalidate every cursor, and a
# leaked cursor key must not forge sessions. Outside production it falls back to SECRET_KEY.
CURSOR_SIGNING_KEY = os.environ.get("CURSOR_SIGNING_KEY", SECRET_KEY)
# The audit chain's checkpoints are HMAC-SHA256-signed with this key when set (D80; empty: unsigned). Never
# logged; a verification with a key set refuses a latest checkpoint that does not verify under it.
AUDIT_CHAIN_SIGNING_KEY = os.environ.get("AUDIT_CHAIN_SIGNING_KEY", "")

# `manage.py drill` injects real faults (databases refusing connections, Redis flushed or paused,
# workers killed); it refuses to run unless this is set.
LIKES_DRILLS_ENABLED = env_bool("LIKES_DRILLS_ENABLED", False)
# When set (seconds), no drill holds its fault longer than this; unset, each drill holds its own length
# (20 s for a database down; `manage.py drill --fault-s` sets one run's).
DRILL_FAULT_MAX_S = env_float("DRILL_FAULT_MAX_S", 0.0)

# Structured logs (issue 10, likes_project.logs): one JSON object per line from every logger (ours,
# Django's, Celery's, gunicorn's), or LOG_FORMAT=console for humans; django.request stays at ERROR.
from likes_project.logs import logging_config  # noqa: E402

LOGGING = logging_config(level=os.environ.get("LOG_LEVEL", "INFO"), fmt=os.environ.get("LOG_FORMAT", "json"))

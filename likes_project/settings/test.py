"""Test settings: the same real PostgreSQL and Redis, two relation shards and three count partitions, the
first manifest sealed over two of them (the third is where a bucket migration scales out to, issue 13)."""

import os
import tempfile

os.environ.setdefault("COUNT_PARTITIONS", "3")
os.environ.setdefault("COUNT_BOOTSTRAP_PARTITIONS", "cnt_00,cnt_01")

# Under pytest-xdist each worker process (PYTEST_XDIST_WORKER=gw0, gw1, ...) has a database set of its own
# (pytest-django suffixes every alias's test database name) and its own Redis key prefix, on the plain Redis
# and on the Cluster alike; the processes a test starts inherit both through the environment (D100).
# LIKES_TEST_RUN_TAG keeps a second run on other databases (DATABASE_URL) off this run's keys too.
os.environ["LIKES_REDIS_PREFIX"] = "-".join(filter(None, ["likes-test", os.environ.get("LIKES_TEST_RUN_TAG"),
                                                          os.environ.get("PYTEST_XDIST_WORKER")]))
# The Prometheus multiprocess directory is not chosen here: `likes_project/__init__.py` imports the Celery app, and
# with it `likes_project.metrics`, before any settings module, and that import fixes the directory (its default is
# the checkout's .data/prometheus). `scripts/test.sh` gives each pass a fresh one in the environment (D141).

from likes_project.settings.base import *  # noqa: F403
from likes_project.settings.base import COUNT_PARTITION_ALIASES, RELATION_SHARD_ALIASES

assert len(RELATION_SHARD_ALIASES) >= 2 and len(COUNT_PARTITION_ALIASES) >= 2, (
    "tests need at least two relation shards and two count partitions, so routing bugs show"
)
# Connections live as a deployment's do (DB_CONN_MAX_AGE, 60 s by default, with health checks): a test, and
# every process it starts, reuses them across requests and tasks. Closing them after each request and task
# (CONN_MAX_AGE 0, as the suite once did) cost a PostgreSQL backend and its catalog caches a request, a
# third of the suite's CPU (issue 28, D100).

LIKES_REDIS_PREFIX = os.environ["LIKES_REDIS_PREFIX"]
XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
if XDIST_WORKER and os.environ.get("LIKES_TEST_BROKER_OF") != XDIST_WORKER:
    # The Celery broker's queues carry no key prefix: each worker's go to a Redis database of their own (gw0 in
    # 14, gw1 in 13, ...), so a drill's Celery worker never takes a job another test process queued. Done once,
    # in the pytest process: a process it starts inherits the URL and this flag.
    from urllib.parse import urlsplit

    _broker = urlsplit(CELERY_BROKER_URL)  # noqa: F405
    CELERY_BROKER_URL = _broker._replace(path=f"/{14 - int(XDIST_WORKER.removeprefix('gw'))}").geturl()
    os.environ["CELERY_BROKER_URL"] = CELERY_BROKER_URL
    os.environ["LIKES_TEST_BROKER_OF"] = XDIST_WORKER
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
# Waits that only bound how long a fault lasts, shortened for the suite (issue 28; production keeps its own):
# a drill's fault holds 4 s instead of up to 20 s, still across several retries (LIKES_RETRY_BASE_S doubling
# from 0.5 s), and a killed worker's consumer leases expire after 6 s instead of 30 s, still an expiry the
# worker-kill drills wait out. What a test asserts does not depend on either length.
DRILL_FAULT_MAX_S = float(os.environ.get("DRILL_FAULT_MAX_S", "4"))
LEDGER_TRANSIENT_WAIT_S = float(os.environ.get("LEDGER_TRANSIENT_WAIT_S", "0.5"))
CONSUMER_LEASE_TTL_S = float(os.environ.get("CONSUMER_LEASE_TTL_S", "6"))
# The relation shard contract is reloaded only when a test (or a `moved` answer) resets it: a timed reload would
# add statements to the tests that count them. Processes a test starts set their own.
RELATION_CONTRACT_REFRESH_S = float(os.environ.get("RELATION_CONTRACT_REFRESH_S", "inf"))
VIDEO_SERVICE_TOKEN = "test-video-service-token"
# Test-only values of their own (DEBUG is false here, so the public development values are refused).
SECRET_KEY = "test-only-secret-key-not-for-any-deployment"
CURSOR_SIGNING_KEY = "test-only-cursor-key-not-for-any-deployment"
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "testserver"]
CELERY_TASK_ALWAYS_EAGER = False
# Tests drive the publisher and projectors explicitly (the real task functions), never via a broker; a
# drill that runs a real worker turns nudges back on for that worker's process only.
LIKES_NUDGE_ENABLED = os.environ.get("LIKES_TEST_NUDGES") == "1"


def _worker_private_dir(variable: str, prefix: str) -> str:
    """A temporary directory of this pytest-xdist worker's own, inherited by the processes it starts (a drill's
    worker and beat) through the environment: the variable is named per worker, so the controller's directory,
    which every worker's environment also holds, is never shared (two workers' export tests once verified each
    other's files)."""
    worker_variable = f"{variable}_{os.environ.get('PYTEST_XDIST_WORKER', 'main').upper()}"
    if worker_variable not in os.environ:
        os.environ[worker_variable] = tempfile.mkdtemp(prefix=prefix)
    return os.environ[worker_variable]


# Files ops jobs produce (exports) go to a private temporary directory, never into the checkout.
OPS_JOB_FILES_DIR = tempfile.mkdtemp(prefix="likes-test-job-files-")
# Recovery snapshot artifacts too (a drill's worker inherits the directory through the environment).
SNAPSHOT_STORAGE_DIR = _worker_private_dir("SNAPSHOT_STORAGE_DIR", "likes-test-snapshots-")
if SNAPSHOT_STORAGE_BACKEND == "filesystem":  # noqa: F405
    STORAGES["recovery_snapshots"]["OPTIONS"]["location"] = SNAPSHOT_STORAGE_DIR  # noqa: F405

# An account's erasure gives up waiting for a stalled pipeline after 0.2 s, not 3 (a test that runs the deletion
# without publishing would wait that long; tests/relations/test_account_erasure.py drives both paths).
ACCOUNT_ERASE_STALL_S = 0.2
# The feature export's files too (issue 31 §3).
FEATURE_EXPORT_DIR = _worker_private_dir("FEATURE_EXPORT_DIR", "likes-test-exports-")
if FEATURE_EXPORT_STORAGE_BACKEND == "filesystem":  # noqa: F405
    STORAGES["feature_exports"]["OPTIONS"]["location"] = FEATURE_EXPORT_DIR  # noqa: F405

from likes_project.settings.guards import refuse_dev_secrets  # noqa: E402

refuse_dev_secrets(globals())

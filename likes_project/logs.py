"""Structured logs (issue 10; SEC-6): one JSON object per line from every logger in the process.

structlog renders both its own events and every stdlib record (`logging.getLogger(__name__)` in our
code, Django, Celery, gunicorn) through one `ProcessorFormatter`, so nothing is rewritten at the call
sites. Every line carries the context bound in this thread: `request_id` in a web request (`user_id`
from the point it is known: the like command's own lines, and the access line and Django's error line
after the view), `task_id` / `task_name` / the enqueuing `request_id` in a Celery task, `operation_id`
/ `event_id` in the like command, and `consumer` / `partition` in a consumer pass, with `entry_id` /
`event_id` while it dead-letters an entry or applies a batch of one (a longer batch: its first and
last entry ids).

Before anything is rendered, `redact` masks credentials wherever they sit (SEC-6): values under
sensitive keys, `Bearer ...` / `Token ...` credentials and `token=` / `sessionid=` pairs inside
strings, the configured service token, and the literals of logged SQL. The console format also
escapes control characters, so user input cannot start a fake line; JSON escapes them by itself.

Importable from the settings module: nothing here reads `django.conf.settings` at import time.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import logging.config
import re
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import structlog

FORMATS = ("json", "console")
REQUEST_ID_HEADER = "X-Request-ID"
# What we accept from a client as its request id; anything else is replaced by a fresh uuid4 hex.
_SANE_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
REDACTED = "[REDACTED]"

_access_log = structlog.stdlib.get_logger("likes_project.access")


# --- context ---------------------------------------------------------------------------------------

def bind(**fields: Any) -> None:
    """Add fields to every line logged from here on in this thread (until the enclosing `scope()`
    ends, or the request / task ends). A None value binds nothing."""
    structlog.contextvars.bind_contextvars(**{k: v for k, v in fields.items() if v is not None})


@contextlib.contextmanager
def bound(**fields: Any) -> Iterator[None]:
    """Bind `fields` for the block; on the way out each of them is as it was before (cheap enough
    for a per-entry loop). None values bind nothing."""
    tokens = structlog.contextvars.bind_contextvars(**{k: v for k, v in fields.items() if v is not None})
    try:
        yield
    finally:
        structlog.contextvars.reset_contextvars(**tokens)


@contextlib.contextmanager
def scope(**fields: Any) -> Iterator[None]:
    """Like `bound`, but the context is restored whole on the way out: fields bound inside the block
    with `bind()` (an event id found half-way through a command) end with it too."""
    before = structlog.contextvars.get_contextvars()
    bind(**fields)
    try:
        yield
    finally:
        structlog.contextvars.clear_contextvars()
        structlog.contextvars.bind_contextvars(**before)


def bound_kwargs(*names: str):
    """Decorator: run each call in a `scope` binding the named keyword arguments."""

    def decorate(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with scope(**{name: kwargs.get(name) for name in names}):
                return fn(*args, **kwargs)

        return wrapper

    return decorate


def context() -> dict[str, Any]:
    """The fields bound in this thread now."""
    return structlog.contextvars.get_contextvars()


def request_id_from(raw: str | None) -> str:
    """The client's request id when it is sane (1-128 of `[A-Za-z0-9._:-]`), else a new uuid4 hex."""
    if raw and _SANE_REQUEST_ID.fullmatch(raw):
        return raw
    return uuid.uuid4().hex


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_NAMED_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape_char(match: re.Match) -> str:
    char = match.group()
    return _NAMED_ESCAPES.get(char) or (f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}")


def printable(value: object) -> str:
    """`value` as a string with control characters escaped (`\\n`, `\\x1b`, ...): for user input that
    goes into a plain log message, so it can never end the line or fake another one."""
    return _CONTROL.sub(_escape_char, str(value))


# --- redaction (SEC-6) -------------------------------------------------------------------------------

# A key naming a credential (normalised: lower case, `-` as `_`): its whole value is masked.
_SENSITIVE_KEY = re.compile(
    r"authorization|cookie|token|passw|secret|api_?key|csrf|session|credential|private_key|signature"
)
# Credentials inside free text: an auth scheme and its credential (`Token`/`Service` only when the
# credential holds a digit, so prose such as "token bucket" or "service unavailable" stays readable),
# header lines (to the end of the line), and key=value pairs of query strings and cookies.
_BEARER = re.compile(r"(?i)\b(bearer|basic)(\s+)[A-Za-z0-9._~+/=-]{4,}")
_SCHEME_CREDENTIAL = re.compile(r"(?i)\b(token|service)(\s*[:=]\s*|\s+)(?=[A-Za-z0-9._~+/=-]*\d)[A-Za-z0-9._~+/=-]{8,}")
_HEADER_LINE = re.compile(r"(?i)\b((?:http_)?(?:authorization|cookie|x[-_]service[-_]token)['\"]?\s*[:=]\s*)[^\n]+")
_KV_CREDENTIAL = re.compile(
    r"(?i)\b((?:api_?key|access_token|refresh_token|auth_token|token|sessionid|session_key|csrftoken"
    r"|csrfmiddlewaretoken|password|passwd|secret|client_secret)=)[^\s&;,'\"]+"
)
# SQL logged by django.db.backends carries its parameters (token keys, session keys): mask its literals.
_SQL_LITERAL = re.compile(r"'(?:[^']|'')*'")
_MAX_DEPTH = 6


def _known_secrets() -> list[str]:
    """Configured secrets to mask verbatim wherever they appear (only once settings are loaded)."""
    from django.conf import settings

    if not settings.configured:
        return []
    values = [getattr(settings, name, "") for name in ("VIDEO_SERVICE_TOKEN", "SECRET_KEY", "CURSOR_SIGNING_KEY")]
    return [v for v in values if isinstance(v, str) and len(v) >= 8]


def redact_text(text: str, secrets: list[str] | None = None) -> str:
    """`text` with every credential pattern (and each configured secret) masked."""
    for secret in _known_secrets() if secrets is None else secrets:
        text = text.replace(secret, REDACTED)
    text = _HEADER_LINE.sub(lambda m: m.group(1) + REDACTED, text)
    text = _BEARER.sub(lambda m: m.group(1) + m.group(2) + REDACTED, text)
    text = _SCHEME_CREDENTIAL.sub(lambda m: m.group(1) + m.group(2) + REDACTED, text)
    return _KV_CREDENTIAL.sub(lambda m: m.group(1) + REDACTED, text)


def _is_sensitive(key: object) -> bool:
    return isinstance(key, str) and bool(_SENSITIVE_KEY.search(key.lower().replace("-", "_")))


def _redact_value(value: Any, secrets: list[str], depth: int = 0) -> Any:
    if isinstance(value, str):
        return redact_text(value, secrets)
    if depth >= _MAX_DEPTH:
        return REDACTED if isinstance(value, (dict, list, tuple, set)) else value
    if isinstance(value, dict):
        return {k: REDACTED if _is_sensitive(k) else _redact_value(v, secrets, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [_redact_value(v, secrets, depth + 1) for v in value]
    return value


def redact(_logger, _method: str, event_dict: dict) -> dict:
    """structlog processor: mask credentials anywhere in the event (SEC-6). Runs after `_plain`, so
    every value is a str, number, bool, None, list or dict by then."""
    secrets = _known_secrets()
    if event_dict.get("logger") == "django.db.backends":
        event_dict.pop("params", None)  # the query's values; the message and `sql` show them quoted
        for key in ("event", "sql"):
            if isinstance(event_dict.get(key), str):
                event_dict[key] = _SQL_LITERAL.sub("'?'", event_dict[key])
    for key, value in list(event_dict.items()):
        event_dict[key] = REDACTED if _is_sensitive(key) else _redact_value(value, secrets)
    return event_dict


_FIRST_KEYS = ("timestamp", "level", "logger", "event")


def _plain(_logger, _method: str, event_dict: dict) -> dict:
    """structlog processor: turn objects (a request, a model, an exception passed as an extra) into
    their repr, so redaction sees the very text the renderer would write; the fixed keys go first."""
    ordered = {k: event_dict.pop(k) for k in _FIRST_KEYS if k in event_dict}
    ordered.update(event_dict)
    return {k: _plain_value(v) for k, v in ordered.items()}


def _plain_value(value: Any, depth: int = 0) -> Any:
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if depth < _MAX_DEPTH and isinstance(value, dict):
        return {str(k): _plain_value(v, depth + 1) for k, v in value.items()}
    if depth < _MAX_DEPTH and isinstance(value, (list, tuple, set, frozenset)):
        return [_plain_value(v, depth + 1) for v in value]
    if isinstance(value, uuid.UUID):
        return str(value)
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return repr(value)


# Attributes every LogRecord has, plus what another handler's formatter may have left on it (the
# rendered `message`, `asctime`): none of them is an `extra`, and `message` would bypass redaction.
_RECORD_ATTRS = frozenset(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime"}


def _add_extras(_logger, _method: str, event_dict: dict) -> dict:
    """structlog processor (stdlib records): the record's `extra=` fields become fields of the line."""
    record = event_dict.get("_record")
    if record is not None:
        for key, value in record.__dict__.items():
            if key not in _RECORD_ATTRS and key not in event_dict:
                event_dict[key] = value
    return event_dict


def _escape_controls(_logger, _method: str, event_dict: dict) -> dict:
    """structlog processor (console only): no raw control character from a value reaches the line.
    The traceback keeps its own line breaks."""
    return {k: v if k == "exception" or not isinstance(v, str) else printable(v) for k, v in event_dict.items()}


# --- configuration -----------------------------------------------------------------------------------

def _shared_processors() -> list:
    """What both structlog's own events and stdlib records get before rendering."""
    return [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True, key="timestamp"),
    ]


def configure_structlog() -> None:
    """structlog's own loggers hand their event dict to the stdlib handler, whose formatter renders it."""
    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            *_shared_processors(),
            structlog.processors.StackInfoRenderer(),
            structlog.stdlib.PositionalArgumentsFormatter(),
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )


def build_formatter(fmt: str = "json") -> structlog.stdlib.ProcessorFormatter:
    """The one formatter of every handler (the dictConfig below names it by path)."""
    if fmt not in FORMATS:
        raise ValueError(f"LOG_FORMAT must be one of {', '.join(FORMATS)}, not {fmt!r}")
    if fmt == "json":
        tail = [structlog.processors.JSONRenderer(sort_keys=False)]
    else:
        tail = [_escape_controls, structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())]
    return structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[*_shared_processors(), _add_extras],
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,  # the traceback as the `exception` field
            _plain,
            redact,
            *tail,
        ],
    )


def logging_config(*, level: str, fmt: str) -> dict:
    """Django's LOGGING: every record of the process through one stderr handler, rendered as `fmt`
    ("json" lines, or "console" for humans) at `level` and above."""
    if fmt not in FORMATS:
        raise ValueError(f"LOG_FORMAT must be one of {', '.join(FORMATS)}, not {fmt!r}")
    configure_structlog()
    level = level.upper()
    # Loggers that bring their own handlers (Django's defaults, gunicorn's) lose them and propagate to
    # the root, so their lines come out in our format too, once.
    propagate = {"handlers": [], "propagate": True}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"structured": {"()": "likes_project.logs.build_formatter", "fmt": fmt}},
        "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "structured"}},
        "root": {"handlers": ["stderr"], "level": level},
        "loggers": {
            "django": {**propagate, "level": level},
            "django.server": {**propagate},
            "django.request": {**propagate, "level": "ERROR"},
            # SQL at DEBUG carries parameter values; it is redacted anyway, but never on by accident.
            "django.db.backends": {**propagate, "level": "INFO"},
            "gunicorn.error": {**propagate, "level": level},
            # The app writes one structured line per request (`likes_project.access`, with request_id
            # and user_id); gunicorn's own access line would repeat it without them.
            "gunicorn.access": {**propagate, "level": "WARNING"},
        },
    }


# --- web requests --------------------------------------------------------------------------------------

_QUIET_PATHS = ("/healthz", "/readyz", "/metrics")  # probes and scrapes: DEBUG unless they fail


def _user_fields(request) -> dict:
    """Who the request ran as, if it is known without a query: DRF sets `request.user` on the Django
    request when it authenticates; a session user is taken only if something already loaded it."""
    from django.utils.functional import empty

    user = request.__dict__.get("user")
    if user is None or getattr(user, "_wrapped", None) is empty:
        return {}
    if not getattr(user, "is_authenticated", False):
        return {}
    pk = getattr(user, "pk", None)
    return {"user_id": pk} if pk is not None else {"principal": str(user)}


class RequestContextMiddleware:
    """First in MIDDLEWARE: a fresh log context per request (nothing leaks from the previous one on
    this thread), its `request_id` from a sane `X-Request-ID` or a new one, echoed on every response,
    and one access line when the response is ready. The context outlives the middleware on purpose:
    Django logs a failed request's line after the middleware chain returns, and gunicorn its access
    line after that; `request_finished` (the response closed) clears it."""

    def __init__(self, get_response):
        from django.core.signals import request_finished

        self.get_response = get_response
        request_finished.connect(_request_finished, dispatch_uid="likes_project.logs.request_finished")

    def __call__(self, request):
        structlog.contextvars.clear_contextvars()
        request_id = request_id_from(request.headers.get(REQUEST_ID_HEADER))
        bind(request_id=request_id)
        started = time.monotonic()
        response = self.get_response(request)
        response[REQUEST_ID_HEADER] = request_id
        bind(**_user_fields(request))
        status = response.status_code
        quiet = status < 400 and request.path.startswith(_QUIET_PATHS)
        (_access_log.debug if quiet else _access_log.info)(
            "request", method=request.method, path=request.path, status=status,
            duration_ms=round((time.monotonic() - started) * 1000, 1),
        )
        return response


def _request_finished(**_kw) -> None:
    structlog.contextvars.clear_contextvars()


# --- Celery ------------------------------------------------------------------------------------------------

_TASK_HEADER = "request_id"


def _on_before_task_publish(headers=None, **_kw) -> None:
    """Carry the enqueuing request's id to the task (a message header)."""
    request_id = context().get("request_id")
    if request_id and isinstance(headers, dict):
        headers.setdefault(_TASK_HEADER, request_id)


def _on_task_prerun(task_id=None, task=None, **_kw) -> None:
    structlog.contextvars.clear_contextvars()
    fields = {"task_id": task_id, "task_name": getattr(task, "name", None)}
    req = getattr(task, "request", None)
    raw = getattr(req, _TASK_HEADER, None) or (getattr(req, "headers", None) or {}).get(_TASK_HEADER)
    if isinstance(raw, str) and _SANE_REQUEST_ID.fullmatch(raw):
        fields["request_id"] = raw
    bind(**fields)


def _on_task_postrun(**_kw) -> None:
    structlog.contextvars.clear_contextvars()


def _on_setup_logging(loglevel=None, **_kw) -> None:
    """Celery configures nothing once a receiver answers this signal: our LOGGING applies to worker and
    beat; `--loglevel` still sets the level of Celery's own loggers."""
    from django.conf import settings

    logging.config.dictConfig(settings.LOGGING)
    if loglevel:
        logging.getLogger("celery").setLevel(loglevel)


def celery_connect() -> None:
    """Connect the log-context and logging-setup receivers (called by `likes_project.celery`)."""
    from celery import signals

    signals.setup_logging.connect(_on_setup_logging, weak=False)
    signals.before_task_publish.connect(_on_before_task_publish, weak=False)
    signals.task_prerun.connect(_on_task_prerun, weak=False)
    signals.task_postrun.connect(_on_task_postrun, weak=False)

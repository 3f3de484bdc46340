"""Domain errors. Services raise these; the API layer renders them as the JSON envelope
`{"code", "message", ...extra}` with `http_status`. Management commands and the admin show
`message` and exit non-zero / show a form error."""

from __future__ import annotations


class DomainError(Exception):
    code = "error"
    http_status = 400
    default_message = "The request could not be processed."

    def __init__(self, message: str | None = None, *, headers: dict | None = None, code: str | None = None,
                 **extra):
        self.message = message or self.default_message
        self.extra = extra
        self.headers = headers or {}
        if code:  # a more precise code than the class's (`Conflict(..., code="approval_void")`)
            self.code = code
        super().__init__(self.message)

    def as_dict(self) -> dict:
        return {"code": self.code, "message": self.message, **self.extra}


class InvalidInput(DomainError):
    code = "invalid_input"
    http_status = 400


class NotFound(DomainError):
    code = "not_found"
    http_status = 404
    default_message = "Not found."


class UserNotFound(NotFound):
    code = "user_not_found"
    default_message = "No such user."


class Forbidden(DomainError):
    code = "forbidden"
    http_status = 403
    default_message = "You may not do this."


class Conflict(DomainError):
    code = "conflict"
    http_status = 409


class RateLimited(DomainError):
    code = "rate_limited"
    http_status = 429
    default_message = "Too many requests; retry later."


class ServiceUnavailable(DomainError):
    code = "service_unavailable"
    http_status = 503
    default_message = "The service is temporarily unavailable; retry later."


class DegradedOverloaded(ServiceUnavailable):
    code = "degraded_overloaded"
    default_message = "Too many database fallback reads; retry shortly."

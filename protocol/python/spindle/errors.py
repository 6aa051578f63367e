"""Errors raised by the SDK: Tinker's exception classes, and SpindleError beneath them.

Every failure the daemon reports arrives as a typed error reply; the SDK raises it as a
SpindleError with the wire ``code`` unchanged (protocol/include/spindle/protocol/wire.h, namespace
errc). Failures detected on the client side use their own codes: ``timeout`` (no reply in time),
``closed`` (the client was closed with the request in flight) and ``bad_reply`` (the daemon's
reply could not be decoded).

The classes Tinker defines (``tinker.TinkerError``, ``APIError``, ``NotFoundError``, ...) exist
here with the same names and hierarchy. ``SpindleError(code, message)`` builds the concrete
subclass for its code, which derives from both SpindleError and the Tinker class the code
corresponds to (CODE_CLASSES), so ``except tinker.NotFoundError`` and ``except
spindle.SpindleError`` both catch a ``not_found`` reply, and ``.code`` is always there.
"""

from __future__ import annotations

# Wire codes (the `code` string of ErrorInfo).
BAD_REQUEST = "bad_request"
UNSUPPORTED_VERSION = "unsupported_version"
UNKNOWN_OP = "unknown_op"
UNAUTHENTICATED = "unauthenticated"
FORBIDDEN = "forbidden"
INVALID_ARGUMENT = "invalid_argument"
LIMIT_EXCEEDED = "limit_exceeded"
NOT_FOUND = "not_found"
ALREADY_EXISTS = "already_exists"
FAILED_PRECONDITION = "failed_precondition"
UNSUPPORTED = "unsupported"
RESOURCE_EXHAUSTED = "resource_exhausted"
OVERLOADED = "overloaded"
UNAVAILABLE = "unavailable"
INTERNAL = "internal"
DATA_LOSS = "data_loss"  # stored bytes are damaged (a blob's checksum, a damaged catalog page)

# Client-side codes.
TIMEOUT = "timeout"
CLOSED = "closed"
BAD_REPLY = "bad_reply"


# ---- Tinker's exception classes (tinker/_exceptions.py), same names and hierarchy -------------

class TinkerError(Exception):
    """Base exception for all Tinker-related errors."""


class APIError(TinkerError):
    """Base class for all API-related errors. ``message``; ``body``: the wire error object
    ({code, message, ...}) for daemon errors, None otherwise; ``request``: None (no HTTP)."""
    message: str = ""
    body: object | None = None
    request: object | None = None


class APIResponseValidationError(APIError):
    """The reply did not match the expected schema (wire code ``bad_reply``)."""


class APIStatusError(APIError):
    """An error reply from the daemon; ``status_code`` is the HTTP status Tinker would use."""
    status_code: int = 0
    response: object | None = None


class APIConnectionError(APIError):
    """The daemon could not be reached (``unavailable``, ``closed``)."""


class APITimeoutError(APIConnectionError):
    """No reply in time (``timeout``)."""


class BadRequestError(APIStatusError):
    """HTTP 400: the request was invalid or malformed."""
    status_code = 400


class AuthenticationError(APIStatusError):
    """HTTP 401: credentials missing or invalid."""
    status_code = 401


class PermissionDeniedError(APIStatusError):
    """HTTP 403: insufficient permissions."""
    status_code = 403


class NotFoundError(APIStatusError):
    """HTTP 404: the requested resource was not found."""
    status_code = 404


class ConflictError(APIStatusError):
    """HTTP 409: the request conflicts with the current state of the resource."""
    status_code = 409


class UnprocessableEntityError(APIStatusError):
    """HTTP 422: well-formed, but not something this daemon can do."""
    status_code = 422


class RateLimitError(APIStatusError):
    """HTTP 429: too many requests (``overloaded`` after the SDK's retries, or a capacity limit
    such as the training session count: ``resource_exhausted``)."""
    status_code = 429


class InternalServerError(APIStatusError):
    """HTTP 500+: an error occurred on the server."""
    status_code = 500


class RequestFailedError(TinkerError):
    """Tinker: an asynchronous request completed in a failed state. Spindle replies fail as
    SpindleError instead; the class exists so code that catches it imports."""

    def __init__(self, message: str, request_id: str = "", category: object = None) -> None:
        super().__init__(message)
        self.message = message
        self.request_id = request_id
        self.category = category


class SidecarError(TinkerError):
    """Tinker's subprocess sampling sidecar (not used by Spindle; importable for compatibility)."""


class SidecarStartupError(SidecarError):
    pass


class SidecarDiedError(SidecarError):
    pass


class SidecarIPCError(SidecarError):
    pass


# ---- SpindleError ---------------------------------------------------------------------------

class SpindleError(TinkerError):
    """An error reply from the daemon, or a client-side failure (codes above).

    ``SpindleError(code, message)`` returns an instance of the subclass for `code` (see
    CODE_CLASSES), which is also the matching Tinker class.

    Attributes:
        code: the wire error code, e.g. ``"not_found"``.
        message: the daemon's explanation (names the field, address or limit).
        op: the operation that failed ("" when unknown).
        retry_after_ms, queue_depth, queue_limit: filled for ``overloaded``.
        body: the wire error object (Tinker's APIError.body).
    """

    def __new__(cls, code: str = INTERNAL, *args, **kwargs):
        if cls is SpindleError:
            cls = _CLASS_FOR_CODE.get(code, SpindleError)
        return super().__new__(cls)

    def __init__(self, code: str, message: str, op: str = "", *, retry_after_ms: int = 0,
                 queue_depth: int = 0, queue_limit: int = 0, body: object | None = None) -> None:
        # Exception.__init__ directly: the Tinker classes' constructors take HTTP objects.
        Exception.__init__(self, f"{code}: {message}" + (f" (op {op})" if op else ""))
        self.code = code
        self.message = message
        self.op = op
        self.retry_after_ms = retry_after_ms
        self.queue_depth = queue_depth
        self.queue_limit = queue_limit
        self.body = body if body is not None else {"code": code, "message": message}
        self.request = None
        self.response = None

    def __reduce__(self):
        return (_rebuild, (self.code, self.message, self.op, self.retry_after_ms,
                           self.queue_depth, self.queue_limit))

    @classmethod
    def from_wire(cls, error: dict, op: str = "") -> "SpindleError":
        return SpindleError(str(error.get("code", INTERNAL)), str(error.get("message", "")), op,
                            retry_after_ms=int(error.get("retry_after_ms", 0)),
                            queue_depth=int(error.get("queue_depth", 0)),
                            queue_limit=int(error.get("queue_limit", 0)), body=dict(error))


def _rebuild(code, message, op, retry_after_ms, queue_depth, queue_limit) -> SpindleError:
    return SpindleError(code, message, op, retry_after_ms=retry_after_ms,
                        queue_depth=queue_depth, queue_limit=queue_limit)


# Wire code -> the Tinker class its SpindleError derives from.
CODE_CLASSES: dict[str, type] = {
    BAD_REQUEST: BadRequestError,
    UNSUPPORTED_VERSION: BadRequestError,
    UNKNOWN_OP: BadRequestError,
    INVALID_ARGUMENT: BadRequestError,
    LIMIT_EXCEEDED: BadRequestError,
    FAILED_PRECONDITION: BadRequestError,
    UNAUTHENTICATED: AuthenticationError,
    FORBIDDEN: PermissionDeniedError,
    NOT_FOUND: NotFoundError,
    ALREADY_EXISTS: ConflictError,
    UNSUPPORTED: UnprocessableEntityError,
    RESOURCE_EXHAUSTED: RateLimitError,
    OVERLOADED: RateLimitError,
    INTERNAL: InternalServerError,
    DATA_LOSS: InternalServerError,
    UNAVAILABLE: APIConnectionError,
    CLOSED: APIConnectionError,
    TIMEOUT: APITimeoutError,
    BAD_REPLY: APIResponseValidationError,
}


def _make_classes() -> dict[str, type]:
    out: dict[str, type] = {}
    by_base: dict[type, type] = {}
    for code, base in CODE_CLASSES.items():
        if base not in by_base:
            name = "Spindle" + base.__name__
            by_base[base] = type(name, (SpindleError, base), {
                "__doc__": f"SpindleError that is also a {base.__name__}.", "__module__": __name__})
            globals()[name] = by_base[base]
        out[code] = by_base[base]
    return out


_CLASS_FOR_CODE = _make_classes()


def unsupported(call: str, why: str) -> SpindleError:
    """The error for a Tinker call this daemon has no equivalent of (UnprocessableEntityError)."""
    return SpindleError(UNSUPPORTED, f"{call} is not supported by Spindle: {why}", call)


__all__ = [
    "APIConnectionError", "APIError", "APIResponseValidationError", "APIStatusError",
    "APITimeoutError", "AuthenticationError", "BadRequestError", "CODE_CLASSES", "ConflictError",
    "InternalServerError", "NotFoundError", "PermissionDeniedError", "RateLimitError",
    "RequestFailedError", "SidecarDiedError", "SidecarError", "SidecarIPCError",
    "SidecarStartupError", "SpindleError", "TinkerError", "UnprocessableEntityError",
]

"""Errors raised by the SDK.

Every failure the daemon reports arrives as a typed error reply; the SDK raises it as
SpindleError with the wire ``code`` unchanged (protocol/include/spindle/protocol/wire.h, namespace
errc). Failures detected on the client side use their own codes: ``timeout`` (no reply in time),
``closed`` (the client was closed with the request in flight) and ``bad_reply`` (the daemon's
reply could not be decoded).
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

# Client-side codes.
TIMEOUT = "timeout"
CLOSED = "closed"
BAD_REPLY = "bad_reply"


class SpindleError(Exception):
    """An error reply from the daemon, or a client-side failure (codes above).

    Attributes:
        code: the wire error code, e.g. ``"not_found"``.
        message: the daemon's explanation (names the field, address or limit).
        op: the operation that failed ("" when unknown).
        retry_after_ms, queue_depth, queue_limit: filled for ``overloaded``.
    """

    def __init__(self, code: str, message: str, op: str = "", *, retry_after_ms: int = 0,
                 queue_depth: int = 0, queue_limit: int = 0) -> None:
        super().__init__(f"{code}: {message}" + (f" (op {op})" if op else ""))
        self.code = code
        self.message = message
        self.op = op
        self.retry_after_ms = retry_after_ms
        self.queue_depth = queue_depth
        self.queue_limit = queue_limit

    @classmethod
    def from_wire(cls, error: dict, op: str = "") -> "SpindleError":
        return cls(str(error.get("code", INTERNAL)), str(error.get("message", "")), op,
                   retry_after_ms=int(error.get("retry_after_ms", 0)),
                   queue_depth=int(error.get("queue_depth", 0)),
                   queue_limit=int(error.get("queue_limit", 0)))

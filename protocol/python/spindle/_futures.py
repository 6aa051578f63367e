"""APIFuture: a request in flight, resolved by the I/O thread, typed on first `result`."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from typing import Callable, Generic, TypeVar

from . import _wire
from .errors import TIMEOUT, SpindleError

T = TypeVar("T")
U = TypeVar("U")


class APIFuture(Generic[T]):
    """Tinker's APIFuture: `.result(timeout=None)` blocks, `await fut` / `await
    fut.result_async()` suspends the coroutine instead. Errors raise SpindleError; a timeout
    raises SpindleError("timeout") and leaves the request in flight (a later `result` may still
    succeed). `convert` turns the raw reply into the response type; it runs at most once."""

    def __init__(self, raw: concurrent.futures.Future, convert: Callable[[_wire.Reply], T]) -> None:
        self._raw = raw
        self._convert = convert
        self._lock = threading.Lock()
        self._done = False
        self._value: T | None = None
        self._error: BaseException | None = None

    @classmethod
    def resolved(cls, value: T) -> "APIFuture[T]":
        raw: concurrent.futures.Future = concurrent.futures.Future()
        raw.set_result(None)
        return cls(raw, lambda _: value)

    @classmethod
    def from_call(cls, executor, fn: Callable[[], T]) -> "APIFuture[T]":
        """fn() run on `executor` (a concurrent.futures executor): for results that take
        several requests (the RestClient's listings)."""
        return cls(executor.submit(fn), lambda value: value)

    def then(self, fn: Callable[[T], "U"]) -> "APIFuture[U]":
        """A future of fn(this future's value), resolved with it (fn runs at most once)."""
        return APIFuture(self._raw, lambda reply: fn(self._convert(reply)))

    def done(self) -> bool:
        return self._raw.done()

    def _finish(self) -> T:
        with self._lock:
            if not self._done:
                try:
                    self._value = self._convert(self._raw.result())
                except BaseException as e:  # SpindleError from the wire, or a decode failure
                    self._error = e
                self._done = True
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]

    def result(self, timeout: float | None = None) -> T:
        try:
            self._raw.result(timeout)
        except concurrent.futures.TimeoutError:
            raise SpindleError(TIMEOUT, f"no reply within {timeout} s") from None
        except SpindleError:
            pass  # re-raised by _finish
        return self._finish()

    async def result_async(self, timeout: float | None = None) -> T:
        wrapped = asyncio.wrap_future(self._raw)
        try:
            await asyncio.wait_for(asyncio.shield(wrapped), timeout)
        except asyncio.TimeoutError:
            raise SpindleError(TIMEOUT, f"no reply within {timeout} s") from None
        except SpindleError:
            pass
        return self._finish()

    def __await__(self):
        return self.result_async().__await__()

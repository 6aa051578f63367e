"""The I/O thread: one per ServiceClient, the only thread that touches its DEALER socket.

Threading rules (STYLE.md 6; pyzmq sockets are not thread-safe):
- Callers (any thread) call `Transport.submit`, which puts the request on a queue.Queue and
  wakes the I/O thread through an inproc PUSH socket guarded by a lock (the lock gives the
  memory barrier ZeroMQ needs when a socket is used from several threads).
- The I/O thread owns the DEALER, the inproc PULL and the table of requests in flight; it
  sends, receives, routes replies by request_id to their concurrent.futures.Future, and retries
  `overloaded` replies after the server's retry_after_ms (at most `max_overloaded_retries`
  times, then the future fails with that `overloaded` error), and `unavailable` replies to the
  ops that change nothing (RESEND_ON_UNAVAILABLE: a cluster worker lost mid-request) every
  UNAVAILABLE_DELAY_S, at most UNAVAILABLE_RETRIES times (PROTOCOL.md "Unavailable").
- Futures are resolved on the I/O thread: their callbacks must not block.
- Streams (ops sample_stream and subscribe answer one request with several replies, the last
  with body "final": true; an error reply ends a stream too) go to a `Stream`, a queue the
  caller reads from any one thread; the id stays in flight until the final reply.
Shutdown goes through the same queue (a stop marker); `close` joins the thread before closing the
sockets and the context. Requests still in flight fail with SpindleError("closed").
"""

from __future__ import annotations

import heapq
import itertools
import logging
import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass

import zmq

from . import _wire
from .errors import CLOSED, OVERLOADED, TIMEOUT, UNAVAILABLE, SpindleError

_log = logging.getLogger("spindle")
_STOP = object()
SEND_TIMEOUT_MS = 10000
# PROTOCOL.md "Unavailable": ops that change nothing on the server are resent after
# `unavailable` (another worker serves the retry); session ops are not (the caller decides).
RESEND_ON_UNAVAILABLE = frozenset({"sample", "compute_logprobs", "reward_test"})
UNAVAILABLE_RETRIES = 20
UNAVAILABLE_DELAY_S = 0.1


@dataclass
class CurveKeys:
    """z85-encoded CURVE keys (40 characters each). server_public_key switches CURVE on."""
    server_public_key: str
    client_public_key: str
    client_secret_key: str


STREAM_OPS = frozenset({"sample_stream", "subscribe"})
_END = object()


def is_final(reply: _wire.Reply) -> bool:
    """Whether `reply` ends its request (wire.h is_final_reply)."""
    return not reply.ok or reply.op not in STREAM_OPS or bool(reply.body.get("final", True))


class Stream:
    """The replies to one stream request, in order: iterate (or call next_reply) from one
    thread. Yields `_wire.Reply` objects with ok=True; the final reply is the last one yielded.
    An error reply (or the client closing) raises SpindleError from the iteration instead."""

    def __init__(self, request_id: int, op: str) -> None:
        self.request_id = request_id
        self.op = op
        self._queue: queue.Queue = queue.Queue()
        self._done = False

    def next_reply(self, timeout: float | None = None) -> _wire.Reply | None:
        """The next reply; None after the final one. Raises SpindleError("timeout") when
        nothing arrives within `timeout` seconds (None = wait forever)."""
        if self._done:
            return None
        try:
            item = self._queue.get(timeout=timeout)
        except queue.Empty:
            raise SpindleError(TIMEOUT, f"no message of {self.op} within {timeout} s", self.op) from None
        if item is _END:
            self._done = True
            return None
        if isinstance(item, BaseException):
            self._done = True
            raise item
        return item

    def __iter__(self):
        while True:
            reply = self.next_reply()
            if reply is None:
                return
            yield reply

    # I/O thread side.
    def _put(self, reply: _wire.Reply) -> None:
        self._queue.put(reply)
        if is_final(reply):
            self._queue.put(_END)

    def _fail(self, error: BaseException) -> None:
        self._queue.put(error)


@dataclass
class _Pending:
    request_id: int
    op: str
    parts: list[bytes]
    future: Future | None = None
    stream: Stream | None = None
    attempts: int = 0
    unavailable_attempts: int = 0

    def fail(self, error: BaseException) -> None:
        if self.stream is not None:
            self.stream._fail(error)
        else:
            self.future.set_exception(error)


class Transport:
    """Pipelined request/reply over one DEALER socket. Thread-safe `submit` and `close`."""

    def __init__(self, endpoint: str, token: str, curve: CurveKeys | None = None,
                 max_overloaded_retries: int = 100) -> None:
        self._token = token
        self._max_retries = max_overloaded_retries
        self.overloaded_retries = 0  # written by the I/O thread only; a statistic for callers
        self.unavailable_retries = 0  # likewise, resends after `unavailable`
        self._ids = itertools.count(1)
        self._ids_lock = threading.Lock()
        self._ctx = zmq.Context()
        self._wake_endpoint = f"inproc://spindle-wake-{id(self):x}"
        self._queue: queue.Queue = queue.Queue()
        self._closed = False
        self._lock = threading.Lock()  # guards _wake_push and _closed
        # The PULL binds before the PUSH connects (inproc needs the bind first in older libzmq).
        self._pull = self._ctx.socket(zmq.PULL)
        self._pull.bind(self._wake_endpoint)
        self._wake_push = self._ctx.socket(zmq.PUSH)
        self._wake_push.setsockopt(zmq.LINGER, 0)
        self._wake_push.connect(self._wake_endpoint)
        self._dealer = self._ctx.socket(zmq.DEALER)
        self._dealer.setsockopt(zmq.LINGER, 0)
        # A DEALER with no connected peer blocks in send (e.g. a CURVE handshake the server
        # refused): bound it, so the I/O thread can always fail the request and see close().
        self._dealer.setsockopt(zmq.SNDTIMEO, SEND_TIMEOUT_MS)
        if curve is not None:
            self._dealer.curve_serverkey = curve.server_public_key.encode("ascii")
            self._dealer.curve_publickey = curve.client_public_key.encode("ascii")
            self._dealer.curve_secretkey = curve.client_secret_key.encode("ascii")
        self._endpoint = endpoint
        self._dealer.connect(endpoint)
        # The sockets now belong to the I/O thread (Thread.start is a memory barrier).
        self._thread = threading.Thread(target=self._run, name="spindle-io", daemon=True)
        self._thread.start()

    @property
    def token(self) -> str:
        return self._token

    def submit(self, op: str, body: dict, frames: list[bytes] | None = None) -> Future:
        """Queues one request; the returned future yields a `_wire.Reply` with ok=True or
        raises SpindleError. Raises ValueError for bodies JSON cannot carry (NaN, inf)."""
        future: Future = Future()
        future.set_running_or_notify_cancel()
        self._queue_request(op, body, frames, lambda rid, parts: _Pending(rid, op, parts, future=future))
        return future

    def submit_stream(self, op: str, body: dict, frames: list[bytes] | None = None) -> Stream:
        """Queues one request of a stream op (STREAM_OPS); its replies arrive on the Stream."""
        holder: list[Stream] = []

        def make(rid: int, parts: list[bytes]) -> _Pending:
            holder.append(Stream(rid, op))
            return _Pending(rid, op, parts, stream=holder[0])

        self._queue_request(op, body, frames, make)
        return holder[0]

    def _queue_request(self, op: str, body: dict, frames: list[bytes] | None, make) -> None:
        with self._ids_lock:
            request_id = next(self._ids)
        parts = _wire.encode_request(request_id, self._token, op, body, frames or [])
        pending = make(request_id, parts)
        with self._lock:
            if self._closed:
                raise SpindleError(CLOSED, "client is closed", op)
            self._queue.put(pending)
            try:
                self._wake_push.send(b"", zmq.NOBLOCK)
            except zmq.Again:
                pass  # the wake pipe is full: wake-ups are pending and drain the whole queue

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._queue.put(_STOP)
            self._wake_push.send(b"", zmq.NOBLOCK)
        if self._thread is threading.current_thread():
            return  # closed from a future callback: the thread closes its sockets on its way out
        self._thread.join()
        self._wake_push.close(linger=0)
        self._ctx.term()

    # ---- I/O thread -----------------------------------------------------------------------

    def _send(self, pending: dict[int, _Pending], request_id: int) -> None:
        """Sends a pending request; one that cannot be sent within SEND_TIMEOUT_MS (no
        connected server) fails with SpindleError("timeout") instead of blocking the thread."""
        try:
            self._dealer.send_multipart(pending[request_id].parts)
        except zmq.Again:
            p = pending.pop(request_id)
            p.fail(SpindleError(
                TIMEOUT, f"could not send {p.op}: no connected server at {self._endpoint}", p.op))

    def _run(self) -> None:
        pending: dict[int, _Pending] = {}
        retries: list[tuple[float, int, int]] = []  # (due, seq, request_id) heap
        seq = itertools.count()
        poller = zmq.Poller()
        poller.register(self._dealer, zmq.POLLIN)
        poller.register(self._pull, zmq.POLLIN)
        try:
            while True:
                timeout_ms = None
                if retries:
                    timeout_ms = max(0, int((retries[0][0] - time.monotonic()) * 1000) + 1)
                events = dict(poller.poll(timeout_ms))
                if self._pull in events and self._drain_submissions(pending):
                    break
                if self._dealer in events:
                    self._drain_replies(pending, retries, seq)
                now = time.monotonic()
                while retries and retries[0][0] <= now:
                    _, _, request_id = heapq.heappop(retries)
                    if request_id in pending:
                        self._send(pending, request_id)
        except Exception as e:  # a socket failure ends the client; fail everything in flight
            _log.exception("spindle I/O thread failed")
            for p in pending.values():
                p.fail(SpindleError(CLOSED, f"I/O thread failed: {e}", p.op))
            pending.clear()
        finally:
            for p in pending.values():
                p.fail(SpindleError(CLOSED, "client closed with the request in flight", p.op))
            while True:  # requests queued after the stop marker
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is not _STOP:
                    item.fail(SpindleError(CLOSED, "client is closed", item.op))
            self._dealer.close(linger=0)
            self._pull.close(linger=0)

    def _drain_submissions(self, pending: dict[int, _Pending]) -> bool:
        """Sends every queued request; True when the stop marker was seen."""
        while True:
            try:
                self._pull.recv(zmq.NOBLOCK)
            except zmq.Again:
                break
        stop = False
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return stop
            if item is _STOP:
                stop = True
                continue
            if stop:
                item.fail(SpindleError(CLOSED, "client is closed", item.op))
                continue
            pending[item.request_id] = item
            self._send(pending, item.request_id)

    def _drain_replies(self, pending: dict[int, _Pending], retries: list, seq) -> None:
        while True:
            try:
                parts = self._dealer.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            try:
                reply = _wire.decode_reply(parts)
            except SpindleError as e:
                _log.warning("dropping undecodable reply: %s", e)
                continue
            p = pending.get(reply.request_id)
            if p is None:
                _log.warning("reply for unknown request %d (op %s)", reply.request_id, reply.op)
                continue
            if not reply.ok and reply.error.get("code") == OVERLOADED and p.attempts < self._max_retries:
                p.attempts += 1
                self.overloaded_retries += 1
                delay_s = max(1, int(reply.error.get("retry_after_ms", 0) or 1)) / 1000.0
                heapq.heappush(retries, (time.monotonic() + delay_s, next(seq), p.request_id))
                continue
            if (not reply.ok and reply.error.get("code") == UNAVAILABLE and p.stream is None
                    and p.op in RESEND_ON_UNAVAILABLE
                    and p.unavailable_attempts < UNAVAILABLE_RETRIES):
                p.unavailable_attempts += 1
                self.unavailable_retries += 1
                heapq.heappush(retries, (time.monotonic() + UNAVAILABLE_DELAY_S, next(seq),
                                         p.request_id))
                continue
            if p.stream is not None:
                if is_final(reply):
                    del pending[reply.request_id]
                if reply.ok:
                    p.stream._put(reply)
                else:
                    p.stream._fail(SpindleError.from_wire(reply.error, reply.op or p.op))
                continue
            del pending[reply.request_id]
            if reply.ok:
                p.future.set_result(reply)
            else:
                p.future.set_exception(SpindleError.from_wire(reply.error, reply.op or p.op))


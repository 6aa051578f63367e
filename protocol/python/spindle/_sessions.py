"""Keeping a ServiceClient's training sessions alive, and ending them.

The daemon closes a training session after its lease (TrainingSessionReply.lease_ms, spindled
--session-lease-s) passes without a request naming it or a `heartbeat` listing it, so a client
that dies frees its sessions. While a TrainingClient object lives, the SessionKeeper's thread
sends `heartbeat` for it every min(lease / 3, 10 s). A TrainingClient that is garbage-collected
(nothing can use it any more) has its session closed; ServiceClient.close() closes them all;
and at interpreter exit every open ServiceClient is closed (`atexit`).

Threading: `add`/`remove`/`close_all`/`stop` are called from any thread. Weakref callbacks (a
TrainingClient collected, on whatever thread the GC ran) only append to a deque and set an
Event; the keeper thread ("spindle-sessions", a daemon thread) turns them into close_training
requests, so no lock is ever taken inside a GC callback.
"""

from __future__ import annotations

import atexit
import collections
import logging
import os
import threading
import weakref
from typing import TYPE_CHECKING

from .errors import CLOSED, UNKNOWN_OP, SpindleError

if TYPE_CHECKING:
    from ._transport import Transport
    from .service_client import ServiceClient
    from .training_client import TrainingClient

_log = logging.getLogger("spindle")

MAX_HEARTBEAT_INTERVAL_S = 10.0
CLOSE_TIMEOUT_S = 5.0


def heartbeat_interval_s(lease_ms: int) -> float | None:
    """How often to renew a lease of `lease_ms` (None: the daemon gives no lease)."""
    if lease_ms <= 0:
        return None
    return min(lease_ms / 3000.0, MAX_HEARTBEAT_INTERVAL_S)


class SessionKeeper:
    def __init__(self, transport: "Transport") -> None:
        self._transport = transport
        self._lock = threading.Lock()
        self._sessions: dict[str, weakref.ref] = {}  # guarded by _lock
        self._lease_ms = 0                           # the shortest lease seen; guarded by _lock
        self._collected: collections.deque[str] = collections.deque()
        self._wake = threading.Event()
        self._stopped = False
        self._thread: threading.Thread | None = None

    def add(self, client: "TrainingClient") -> None:
        sid = client.session_id
        collected = self._collected
        wake = self._wake

        def on_collected(_ref, sid=sid) -> None:  # GC callback: no locks here
            collected.append(sid)
            wake.set()

        with self._lock:
            self._sessions[sid] = weakref.ref(client, on_collected)
            lease = int(client.info.lease_ms or 0)
            if lease > 0:
                self._lease_ms = min(self._lease_ms, lease) if self._lease_ms else lease
            if self._thread is None and not self._stopped:
                self._thread = threading.Thread(target=self._run, name="spindle-sessions",
                                                daemon=True)
                self._thread.start()
        wake.set()  # a shorter lease may shorten the wait

    def remove(self, session_id: str) -> None:
        with self._lock:
            self._sessions.pop(session_id, None)

    def live(self) -> list[str]:
        with self._lock:
            return [sid for sid, ref in self._sessions.items() if ref() is not None]

    def close_all(self, timeout_s: float = CLOSE_TIMEOUT_S) -> None:
        """Closes every registered session (best effort: errors and timeouts are ignored)."""
        with self._lock:
            ids = list(self._sessions)
            self._sessions.clear()
        futures = []
        for sid in ids:
            try:
                futures.append(self._transport.submit("close_training", {"session_id": sid}))
            except SpindleError:
                return  # the transport is closed
        for f in futures:
            try:
                f.result(timeout_s)
            except Exception:  # not_found (expired), closed, timeout: nothing left to free
                pass

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            thread = self._thread
        self._wake.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=CLOSE_TIMEOUT_S)

    # ---- keeper thread ------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._lock:
                interval = heartbeat_interval_s(self._lease_ms)
            self._wake.wait(interval)
            self._wake.clear()
            with self._lock:
                if self._stopped:
                    return
            self._close_collected()
            if interval is not None:
                try:
                    self._heartbeat(interval)
                except SpindleError as e:
                    if e.code == CLOSED:
                        return
                    if e.code == UNKNOWN_OP:  # a daemon without leases
                        with self._lock:
                            self._lease_ms = 0
                    _log.warning("spindle: heartbeat failed: %s", e)

    def _close_collected(self) -> None:
        while self._collected:
            sid = self._collected.popleft()
            with self._lock:
                ref = self._sessions.get(sid)
                if ref is None or ref() is not None:
                    continue  # closed already, or re-registered by a live client
                del self._sessions[sid]
            try:
                self._transport.submit("close_training", {"session_id": sid})
            except SpindleError:
                return

    def _heartbeat(self, timeout_s: float) -> None:
        ids = self.live()
        if not ids:
            return
        reply = self._transport.submit("heartbeat", {"session_ids": ids}).result(
            max(timeout_s, 1.0))
        body = reply.body
        lease = int(body.get("lease_ms", 0))
        unknown = [str(s) for s in body.get("unknown", [])]
        with self._lock:
            if lease > 0:
                self._lease_ms = lease
            for sid in unknown:
                self._sessions.pop(sid, None)
        for sid in unknown:
            _log.warning("spindle: training session %s is no longer open on the daemon (its "
                         "lease expired or it was closed); its saved revisions remain", sid)


# ---- interpreter exit ---------------------------------------------------------------------------

_open_clients: "weakref.WeakSet[ServiceClient]" = weakref.WeakSet()


def track(client: "ServiceClient") -> None:
    _open_clients.add(client)


def untrack(client: "ServiceClient") -> None:
    _open_clients.discard(client)


def _close_open_clients() -> None:
    for client in list(_open_clients):
        if getattr(client, "_pid", None) != os.getpid():
            continue  # inherited through fork: its I/O thread lives in the parent
        try:
            client.close()
        except Exception:  # exiting: nothing useful to do with a failure
            pass


atexit.register(_close_open_clients)

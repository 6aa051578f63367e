"""The SDK's stream objects: a streaming sample and an event subscription, both reading a
_transport.Stream (the replies of one request id, the last one final)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Iterator

from . import _convert, _wire
from ._transport import Stream
from .errors import BAD_REPLY, SpindleError
from .types import SampleResponse
from .types._rewards import RewardRow
from .types._runs import run_status
from .types._studio import DatasetInfo, Event, RewardPlugin, SampleDelta
from .types._records import from_wire

if TYPE_CHECKING:
    from .service_client import ServiceClient


class SampleStream:
    """Iterating yields a SampleDelta per sequence and server message as the tokens come, then
    the final SampleResponse (exactly what `sample` returns for the same request) as the last
    item. result() reads what is left and returns that SampleResponse. An error raises
    SpindleError from the iteration. Read it from one thread."""

    def __init__(self, stream: Stream) -> None:
        self._stream = stream
        self.response: SampleResponse | None = None  # set once the final message arrived

    def __iter__(self) -> Iterator[SampleDelta | SampleResponse]:
        for reply in self._stream:
            if reply.body.get("final"):
                self.response = _convert.sample_response(reply)
                yield self.response
                return
            for i, d in enumerate(reply.body.get("deltas", [])):
                tokens = _wire.read_tensor(d["tokens"], reply.frames, f"deltas[{i}].tokens")
                logprobs = _wire.read_tensor(d["logprobs"], reply.frames, f"deltas[{i}].logprobs")
                pieces = [str(p) for p in d.get("pieces", [])]
                if len(pieces) != len(tokens):
                    raise SpindleError(BAD_REPLY, f"sample_stream: deltas[{i}] has {len(pieces)} "
                                       f"pieces for {len(tokens)} tokens")
                yield SampleDelta(sequence=int(d.get("sequence", 0)), tokens=[int(t) for t in tokens],
                                  logprobs=[float(x) for x in logprobs], pieces=pieces)

    def result(self) -> SampleResponse:
        for _ in self:
            pass
        assert self.response is not None
        return self.response


class Subscription:
    """The caller's tenant's events on the client's own connection (op subscribe). Iterating
    yields Event objects until the subscription ends (close(), or the daemon stopping); it
    blocks while no event comes. close() unsubscribes; iteration then ends after the final
    "closed" message. Read it from one thread; close() may be called from any."""

    def __init__(self, service: "ServiceClient", stream: Stream) -> None:
        self._service = service
        self._stream = stream
        first = stream.next_reply(timeout=30.0)  # "subscribed": the subscription is live
        if first is None or first.body.get("topic") != "subscribed":
            raise RuntimeError(f"subscribe: unexpected first message {first!r}")
        self.closed = False

    @property
    def id(self) -> int:
        """The subscribe request's id (what unsubscribe names)."""
        return self._stream.request_id

    def next_event(self, timeout: float | None = None) -> Event | None:
        """The next event; None once the subscription has ended. Raises
        SpindleError("timeout") when none comes within `timeout` seconds."""
        while True:
            reply = self._stream.next_reply(timeout)
            if reply is None:
                self.closed = True
                return None
            topic = str(reply.body.get("topic", ""))
            if topic == "metrics":
                return Event(topic=topic, run=run_status(reply.body.get("run", {})))
            if topic == "residency":
                return Event(topic=topic, status=_convert.status(
                    _wire.Reply(reply.request_id, "status", True, reply.body.get("status", {}))))
            # "closed" (final): the next read returns None

    def __iter__(self) -> Iterator[Event]:
        while True:
            event = self.next_event()
            if event is None:
                return
            yield event

    def close(self) -> None:
        """Unsubscribes (idempotent; a subscription the daemon already closed is fine)."""
        if self.closed:
            return
        self.closed = True
        try:
            self._service._call("unsubscribe", {"subscription": self.id}, lambda r: None)
        except Exception as e:  # already gone (daemon stopped): nothing to end
            if getattr(e, "code", "") not in ("not_found", "closed", "unavailable"):
                raise

    def __enter__(self) -> "Subscription":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def reward_plugins(reply: _wire.Reply) -> list[RewardPlugin]:
    return [from_wire(RewardPlugin, p) for p in reply.body.get("plugins", [])]


def _row(obj: dict) -> RewardRow:
    text = str(obj.get("metadata_json", "") or "")
    try:
        metadata = json.loads(text) if text else None
    except ValueError:
        metadata = text
    return RewardRow(prompt=str(obj.get("prompt", "")), reference=str(obj.get("reference", "")),
                     metadata=metadata)


def datasets(reply: _wire.Reply) -> list[DatasetInfo]:
    return [from_wire(DatasetInfo, d, examples=[_row(e) for e in d.get("examples", [])])
            for d in reply.body.get("datasets", [])]

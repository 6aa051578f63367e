"""SDK transport and wire encoding against an in-process ROUTER (real ZeroMQ sockets, no
daemon): the exact J header the SDK sends, routing of out-of-order replies by request_id,
transparent `overloaded` retries, error mapping, asyncio and close(). The daemon-backed tests
(test_sdk, test_sft, test_rl) check the same paths end to end."""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
import threading

import numpy as np
import pytest
import zmq

import spindle
from spindle import types


class FakeDaemon:
    """A ROUTER thread. `handler(header, frames)` returns (ok, body_or_error, frames) or None
    to hold the request; held requests are answered in reverse order by `flush_held`."""

    def __init__(self, handler) -> None:
        self.dir = tempfile.mkdtemp(prefix="spdfake")
        self.endpoint = f"ipc://{self.dir}/fake.sock"
        self.handler = handler
        self.received: list[tuple[dict, list[bytes]]] = []
        self._ctx = zmq.Context()
        self._router = self._ctx.socket(zmq.ROUTER)
        self._router.bind(self.endpoint)
        self._stop = self._ctx.socket(zmq.PAIR)
        self._stop.bind("inproc://fake-stop")
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _reply(self, identity: bytes, header: dict, ok: bool, payload: dict, frames) -> None:
        out = {"protocol_version": 1, "request_id": header["request_id"], "op": header["op"], "ok": ok}
        out["body" if ok else "error"] = payload
        self._router.send_multipart([identity, b"J" + json.dumps(out).encode(), *frames])

    def _run(self) -> None:
        stop = self._ctx.socket(zmq.PAIR)
        stop.connect("inproc://fake-stop")
        poller = zmq.Poller()
        poller.register(self._router, zmq.POLLIN)
        poller.register(stop, zmq.POLLIN)
        held = []
        while True:
            events = dict(poller.poll())
            if stop in events:
                msg = stop.recv()
                if msg == b"flush":
                    for identity, header in reversed(held):
                        self._reply(identity, header, True, {"echo": header["request_id"]}, [])
                    held.clear()
                    continue
                break
            identity, head, *frames = self._router.recv_multipart()
            assert head[:1] == b"J"
            header = json.loads(head[1:])
            self.received.append((header, frames))
            if header["op"] == "handshake":
                self._reply(identity, header, True, {"protocol_version": 1, "server_version": "fake",
                                                     "tenant": "local"}, [])
                continue
            answer = self.handler(header, frames)
            if answer is None:
                held.append((identity, header))
            else:
                self._reply(identity, header, *answer)
        stop.close()
        self._router.close(linger=0)

    def flush_held(self) -> None:
        self._stop.send(b"flush")

    def close(self) -> None:
        self._stop.send(b"stop")
        self._thread.join()
        self._stop.close()
        self._ctx.term()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def fake():
    servers = []

    def start(handler):
        servers.append(FakeDaemon(handler))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


def _all_objects(value):
    if isinstance(value, dict):
        yield value
        for v in value.values():
            yield from _all_objects(v)
    elif isinstance(value, list):
        for v in value:
            yield from _all_objects(v)


def test_forward_backward_header_is_complete_cereal_json(fake):
    def handler(header, frames):
        n = len(frames[0]) // 4  # model_input is frame 0
        lp = np.full(n, -0.5, "<f4")
        return True, {"loss_fn_outputs": [[{"name": "logprobs", "tensor": {
            "frame": 0, "dtype": "float32", "shape": [n]}}]],
                      "metrics": [{"name": "loss:sum", "value": 1.5}]}, [lp.tobytes()]

    server = fake(handler)
    with spindle.ServiceClient(server.endpoint, token="tok") as service:
        client = spindle.TrainingClient(service, types.TrainingSessionInfo(session_id="s1"))
        datum = types.Datum(model_input=types.ModelInput.from_ints([1, 5, 9]),
                            loss_fn_inputs={"target_tokens": [5, 9, 2],
                                            "weights": np.array([0.0, 1.0, 1.0])})
        out = client.forward_backward([datum], "cross_entropy", {"clip_low_threshold": 1}).result()
    assert out.metrics == {"loss:sum": 1.5}
    assert out.loss_fn_outputs[0]["logprobs"].tolist() == [-0.5, -0.5, -0.5]

    header, frames = server.received[-1]
    assert header["protocol_version"] == 1 and header["token"] == "tok"
    assert header["op"] == "forward_backward" and isinstance(header["request_id"], int)
    body = header["body"]
    assert all(obj.get("cereal_class_version") == 1 for obj in _all_objects(body))
    assert body["session_id"] == "s1" and body["loss_fn"] == "cross_entropy"
    assert body["loss_fn_config"][0]["name"] == "clip_low_threshold"
    assert isinstance(body["loss_fn_config"][0]["value"], float)
    datum_msg = body["data"][0]
    refs = {"model_input": datum_msg["model_input"]}
    refs.update({i["name"]: i["tensor"] for i in datum_msg["loss_fn_inputs"]})
    assert {k: r["dtype"] for k, r in refs.items()} == {
        "model_input": "int32", "target_tokens": "int32", "weights": "float32"}
    assert all(r["shape"] == [3] for r in refs.values())
    assert np.frombuffer(frames[refs["model_input"]["frame"]], "<i4").tolist() == [1, 5, 9]
    assert np.frombuffer(frames[refs["target_tokens"]["frame"]], "<i4").tolist() == [5, 9, 2]
    assert np.frombuffer(frames[refs["weights"]["frame"]], "<f4").tolist() == [0.0, 1.0, 1.0]


def test_sample_request_fields_and_reply_decoding(fake):
    def handler(header, frames):
        tokens = np.array([7, 8], "<i4").tobytes()
        logprobs = np.array([-1.0, -2.0], "<f4").tobytes()
        seq = {"tokens": {"frame": 0, "dtype": "int32", "shape": [2]},
               "logprobs": {"frame": 1, "dtype": "float32", "shape": [2]},
               "stop_reason": "stop", "text": "hi"}
        return True, {"revision_id": "r1", "sequences": [seq]}, [tokens, logprobs]

    server = fake(handler)
    with spindle.ServiceClient(server.endpoint, token="tok") as service:
        sampler = service.create_sampling_client(model_path="spindle://local/p@r1")
        params = types.SamplingParams(max_tokens=4, temperature=0.5, top_k=-1, seed=3,
                                      stop=["\n", 2])
        result = sampler.sample(types.ModelInput.from_ints([1, 2]), 1, params).result()
    assert result.revision_id == "r1"
    assert result.sequences[0].tokens == [7, 8] and result.sequences[0].logprobs == [-1.0, -2.0]
    assert result.sequences[0].stop_reason == "stop" and result.sequences[0].text == "hi"
    body = server.received[-1][0]["body"]
    sp = body["sampling_params"]
    assert sp["stop_token_ids"] == [2] and sp["stop_strings"] == ["\n"]
    assert sp["top_k"] == 0 and sp["seed"] == 3 and sp["max_tokens"] == 4
    assert isinstance(sp["temperature"], float) and isinstance(sp["top_p"], float)
    assert body["num_samples"] == 1 and body["address"] == "spindle://local/p@r1"


def test_pipelined_replies_route_by_request_id(fake):
    server = fake(lambda header, frames: None)  # hold everything, answer in reverse
    with spindle.ServiceClient(server.endpoint, token="tok") as service:
        futures = [service._request("status", {}, None, lambda r: r.body["echo"]) for _ in range(6)]
        while len(server.received) < 7:
            threading.Event().wait(0.01)
        assert not any(f.done() for f in futures)
        server.flush_held()
        ids = [f.result(timeout=10) for f in futures]
    assert ids == [h["request_id"] for h, _ in server.received[1:]]
    assert len(set(ids)) == 6


def test_overloaded_is_retried_transparently(fake):
    refusals = {"left": 3}

    def handler(header, frames):
        if refusals["left"] > 0:
            refusals["left"] -= 1
            return False, {"code": "overloaded", "message": "queue full", "queue_depth": 9,
                           "queue_limit": 8, "retry_after_ms": 2}, []
        return True, {"server_version": "fake"}, []

    server = fake(handler)
    with spindle.ServiceClient(server.endpoint, token="tok") as service:
        assert service.status().server_version == "fake"
    statuses = [h for h, _ in server.received if h["op"] == "status"]
    assert len(statuses) == 4 and len({h["request_id"] for h in statuses}) == 1


def test_overloaded_retries_are_bounded(fake):
    server = fake(lambda h, f: (False, {"code": "overloaded", "message": "full", "queue_depth": 1,
                                        "queue_limit": 1, "retry_after_ms": 1}, []))
    with spindle.ServiceClient(server.endpoint, token="tok", max_overloaded_retries=2) as service:
        with pytest.raises(spindle.SpindleError) as err:
            service.status()
    assert err.value.code == "overloaded" and err.value.queue_limit == 1


def test_error_reply_raises_typed_error_and_asyncio_variants(fake):
    def handler(header, frames):
        if header["op"] == "catalog_show":
            return False, {"code": "not_found", "message": "no policy x", "queue_depth": 0,
                           "queue_limit": 0, "retry_after_ms": 0}, []
        lp = np.array([np.nan, -1.0, -2.0], "<f4").tobytes()
        return True, {"revision_id": "", "logprobs": {"frame": 0, "dtype": "float32", "shape": [3]}}, [lp]

    server = fake(handler)
    with spindle.ServiceClient(server.endpoint, token="tok") as service:
        with pytest.raises(spindle.SpindleError) as err:
            service.show("spindle://local/x")
        assert err.value.code == "not_found" and "no policy x" in err.value.message
        sampler = service.create_sampling_client(base_model="base")

        async def main():
            return await asyncio.gather(*[sampler.compute_logprobs_async(
                types.ModelInput.from_ints([1, 2, 3])) for _ in range(4)])

        results = asyncio.run(main())
    assert results == [[None, -1.0, -2.0]] * 4


def test_close_fails_requests_in_flight(fake):
    server = fake(lambda header, frames: None)
    service = spindle.ServiceClient(server.endpoint, token="tok")
    future = service._request("status", {}, None, lambda r: r)
    service.close()
    with pytest.raises(spindle.SpindleError) as err:
        future.result(timeout=10)
    assert err.value.code == "closed"
    with pytest.raises(spindle.SpindleError):
        service.status()


def test_absent_daemon_times_out_on_handshake(tmp_path):
    with pytest.raises(spindle.SpindleError) as err:
        spindle.ServiceClient(f"ipc://{tmp_path / 'none.sock'}", token="tok", connect_timeout_s=0.3)
    assert err.value.code == "timeout"


def test_non_finite_values_are_refused_before_sending(fake):
    server = fake(lambda h, f: (True, {}, []))
    with spindle.ServiceClient(server.endpoint, token="tok") as service:
        client = spindle.TrainingClient(service, types.TrainingSessionInfo(session_id="s"))
        with pytest.raises(ValueError):
            client.optim_step(types.AdamParams(learning_rate=float("nan")))

"""`overloaded` against a real spindled with a tiny queue: a burst of pipelined requests is
refused in part, the SDK retries after retry_after_ms, and every request ends with the same
result it gets alone (none lost, none duplicated)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import spindle
from spindle import types

from conftest import Daemon, shared_dir


@pytest.fixture(scope="module")
def small_queue_daemon():
    binary = os.environ.get("SPINDLED_BIN", "")
    model = shared_dir() / "models" / "stories260K" / "stories260K.bin"
    if not binary or not Path(binary).is_file() or not model.is_file():
        pytest.skip("needs SPINDLED_BIN and the stories260K fixture")
    d = Daemon(Path(binary), model, ["--max-queue", "2", "--retry-after-ms", "5"])
    yield d
    assert d.stop() == 0


def test_burst_is_retried_until_served(small_queue_daemon):
    d = small_queue_daemon
    with spindle.ServiceClient(d.endpoint, token=d.token) as client:
        sampler = client.create_sampling_client(base_model="stories260K")
        prompt = types.ModelInput.from_ints([1])
        params = [types.SamplingParams(max_tokens=64, seed=s) for s in range(24)]
        futures = [sampler.sample(prompt, 4, p) for p in params]
        burst = [[s.tokens for s in f.result(timeout=300).sequences] for f in futures]
        assert client.overloaded_retries > 0
        for p, tokens in zip(params[:4], burst[:4]):
            assert [s.tokens for s in sampler.sample(prompt, 4, p).result().sequences] == tokens
    with spindle.ServiceClient(d.endpoint, token=d.token, max_overloaded_retries=0) as client:
        sampler = client.create_sampling_client(base_model="stories260K")
        futures = [sampler.sample(prompt, 4, p) for p in params]
        codes = []
        for f in futures:
            try:
                f.result(timeout=300)
                codes.append("ok")
            except spindle.SpindleError as e:
                assert e.queue_limit == 2 and e.retry_after_ms == 5
                codes.append(e.code)
        assert set(codes) == {"ok", "overloaded"}

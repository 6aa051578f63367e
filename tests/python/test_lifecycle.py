"""What lives how long, against real spindleds on stories260K: ephemeral revisions (ttl_seconds)
expire and are collected unless promoted; a training session lives while its client does (the
SDK's heartbeats renew its lease) and is freed when the client goes: SIGKILLed (the lease runs
out), exiting without close() (atexit closes it) or dropping the TrainingClient; so the
max_sessions+1-th run after clients exit gets a session."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import spindle as tinker
from conftest import SOURCE_DIR, Daemon, shared_dir
from helpers import BOS, sft_datum

LEASE_S = 2
SDK_PATH = os.environ.get("SPINDLE_SDK_PATH") or str(SOURCE_DIR / "protocol" / "python")
CHILD = """
import sys, time
sys.path.insert(0, {sdk!r})
import spindle
service = spindle.ServiceClient(base_url={endpoint!r}, api_key={token!r})
training = service.create_lora_training_client("stories260K", rank=2, seed=1)
print("ready", training.session_id, flush=True)
if {hold}:
    time.sleep(600)
"""


def start_daemon(args: list[str]) -> Daemon:
    binary = os.environ.get("SPINDLED_BIN", "")
    if not binary or not Path(binary).is_file():
        pytest.skip(f"spindled binary not found (SPINDLED_BIN={binary!r})")
    model = shared_dir() / "models" / "stories260K" / "stories260K.bin"
    if not model.is_file():
        pytest.skip(f"fixture missing: {model}")
    return Daemon(Path(binary), model, args)


@pytest.fixture(scope="module")
def short():
    """Leases of LEASE_S seconds; expired revisions collected every second."""
    d = start_daemon(["--session-lease-s", str(LEASE_S), "--expiry-sweep-s", "1"])
    yield d
    assert d.stop() == 0, "".join(d.log[-40:])


@pytest.fixture(scope="module")
def long():
    """Leases far longer than any test here: a session that goes away was closed."""
    d = start_daemon(["--session-lease-s", "600"])
    yield d
    assert d.stop() == 0, "".join(d.log[-40:])


@pytest.fixture
def connect():
    clients = []

    def make(daemon: Daemon) -> tinker.ServiceClient:
        clients.append(tinker.ServiceClient(base_url=daemon.endpoint, api_key=daemon.token))
        return clients[-1]

    yield make
    for c in clients:
        c.close()


def child(daemon: Daemon, hold: bool) -> subprocess.Popen:
    code = CHILD.format(sdk=SDK_PATH, endpoint=daemon.endpoint, token=daemon.token, hold=hold)
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)


def wait_for(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"{what}: not within {timeout_s} s")


def sessions(service: tinker.ServiceClient) -> int:
    return service.status().training_sessions


def test_ephemeral_revisions_expire_unless_promoted(short, connect):
    service = connect(short)
    training = service.create_lora_training_client("stories260K", rank=4, seed=1, policy="lc-ttl")
    datum = sft_datum([BOS], [300, 301, 302])
    training.forward_backward([datum], "cross_entropy")
    training.optim_step(tinker.AdamParams(learning_rate=1e-2))
    gone = training.save_weights_for_sampler("gone", ttl_seconds=1).result()
    kept = training.save_weights_for_sampler("kept", ttl_seconds=1).result()
    durable = training.save_state("durable").result()
    assert gone.expires_ms > 0 and kept.expires_ms > 0 and durable.expires_ms == 0
    prompt = tinker.ModelInput.from_ints([BOS, 300])
    params = tinker.SamplingParams(max_tokens=3, seed=1)
    before = service.create_sampling_client(gone.path).sample(prompt, 1, params).result()
    assert before.revision_id == gone.revision_id  # servable until it expires
    rest = service.create_rest_client()
    rest.set_checkpoint_ttl_from_tinker_path(kept.path, None).result()  # catalog_promote

    def expired():
        listed = {c.checkpoint_id: c for c in rest.list_checkpoints("lc-ttl").result().checkpoints}
        return listed if listed[gone.revision_id].expired else None

    listed = wait_for(expired, 15, "the ephemeral revision expired")
    assert not listed[kept.revision_id].expired and listed[kept.revision_id].expires_at is None
    with pytest.raises(tinker.NotFoundError, match="expired"):
        service.create_sampling_client(gone.path).sample(prompt, 1, params).result()
    for path in (kept.path, durable.path):
        assert service.create_sampling_client(path).sample(prompt, 1, params).result().sequences
    with pytest.raises(tinker.NotFoundError):
        rest.set_checkpoint_ttl_from_tinker_path(gone.path, None).result()


def test_heartbeats_keep_an_idle_session(short, connect):
    service = connect(short)
    training = service.create_lora_training_client("stories260K", rank=2, seed=1)
    assert training.info.lease_ms == LEASE_S * 1000
    time.sleep(3 * LEASE_S)
    out = training.forward([sft_datum([BOS], [300, 301])]).result()
    assert out.metrics["n_tokens:sum"] == 2
    training.close()


def test_killed_clients_free_their_sessions(short, connect):
    service = connect(short)
    limit = service.get_server_capabilities().limits.max_sessions
    assert 0 < limit <= 16
    wait_for(lambda: sessions(service) == 0, 3 * LEASE_S + 5, "no sessions left over")
    children = [child(short, hold=True) for _ in range(limit)]
    try:
        for c in children:
            assert c.stdout.readline().startswith("ready")
        assert sessions(service) == limit
        with pytest.raises(tinker.RateLimitError) as err:
            service.create_lora_training_client("stories260K", rank=2)
        assert err.value.code == "resource_exhausted"
    finally:
        for c in children:
            c.send_signal(signal.SIGKILL)
            c.wait()
    wait_for(lambda: sessions(service) == 0, 3 * LEASE_S + 5, "the killed clients' sessions freed")
    service.create_lora_training_client("stories260K", rank=2).close()


def test_exiting_or_dropping_a_client_closes_its_sessions(long, connect):
    service = connect(long)
    limit = service.get_server_capabilities().limits.max_sessions
    for i in range(limit + 1):  # never more than one open: each child's exit closed its own
        c = child(long, hold=False)
        out, _ = c.communicate(timeout=60)
        assert c.returncode == 0 and out.startswith("ready"), (i, out)
        wait_for(lambda: sessions(service) == 0, 5, f"child {i}'s session closed at exit")

    training = service.create_lora_training_client("stories260K", rank=2)
    assert sessions(service) == 1
    del training
    gc.collect()
    wait_for(lambda: sessions(service) == 0, 5, "a dropped TrainingClient's session closed")

    training = service.create_lora_training_client("stories260K", rank=2)
    service.close()  # closes its sessions too
    other = connect(long)
    assert sessions(other) == 0
    with pytest.raises(tinker.APIConnectionError):
        training.forward([sft_datum([BOS], [300])])

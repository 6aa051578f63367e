"""CURVE over TCP against a real spindled: a client whose public key is on the allow-list gets
service; a client with another key gets none (the handshake times out)."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from pathlib import Path

import pytest
import zmq

import spindle
from spindle import types

from conftest import Daemon, shared_dir


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def tcp_daemon():
    binary = os.environ.get("SPINDLED_BIN", "")
    model = shared_dir() / "models" / "stories260K" / "stories260K.bin"
    if not binary or not Path(binary).is_file() or not model.is_file():
        pytest.skip("needs SPINDLED_BIN and the stories260K fixture")
    public, secret = (k.decode("ascii") for k in zmq.curve_keypair())
    allow = Path(tempfile.mkdtemp(prefix="spdkeys")) / "authorized_clients"
    allow.write_text(f"# the test's client\n{public}\n")
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    d = Daemon(Path(binary), model, ["--tcp", endpoint, "--authorized-clients", str(allow)])
    yield d, endpoint, (public, secret)
    shutil.rmtree(allow.parent, ignore_errors=True)
    assert d.stop() == 0


def test_allow_listed_client_is_served(tcp_daemon):
    d, endpoint, keys = tcp_daemon
    server_key = (d.data_dir / "curve" / "server.pub").read_text().strip()
    with spindle.ServiceClient(endpoint, token=d.token, server_public_key=server_key,
                               client_keys=keys, connect_timeout_s=30) as client:
        assert client.server.tenant == "local"
        base = client.get_server_capabilities().bases[0].id
        out = client.create_sampling_client(base_model=base).sample(
            types.ModelInput.from_ints([1]), 2, types.SamplingParams(max_tokens=4, seed=1)).result()
        assert [len(s.tokens) for s in out.sequences] == [4, 4]


def test_unknown_client_key_gets_no_service(tcp_daemon):
    d, endpoint, _ = tcp_daemon
    server_key = (d.data_dir / "curve" / "server.pub").read_text().strip()
    with pytest.raises(spindle.SpindleError) as err:
        spindle.ServiceClient(endpoint, token=d.token, server_public_key=server_key,
                              connect_timeout_s=2)  # a fresh keypair, not on the allow-list
    assert err.value.code == "timeout"
    assert any("refus" in line.lower() or "denied" in line.lower() for line in d.log), d.log[-10:]

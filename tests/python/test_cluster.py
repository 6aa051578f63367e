"""A coordinator and three worker processes on stories260K over IPC (issue 17): routing lands a
policy's requests on one worker and a hot policy spills to a second under load, a training
session trains and saves through its worker and the saved revision samples from another process,
two tenants' same-named policies stay apart on the workers, and a worker killed with SIGKILL is
lost (its policies move, its session is restored on another worker from its last save_state).
Separate small clusters: a coordinator killed and restarted on its data dir (workers re-register,
acknowledged revisions serve again), and workers joining over TCP with CURVE (allow-listed)."""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

import spindle
from spindle import types

from conftest import Daemon, spindled_and_model
from helpers import BOS, finished_run, sft_datum


def wait_for(predicate, timeout=30.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def start_workers(binary: Path, model: Path, coord: Daemon, names: list[str]) -> list[Daemon]:
    """Worker processes joining `coord` over its default IPC cluster endpoint."""
    endpoint = f"ipc://{coord.data_dir / 'spindled-cluster.sock'}"
    return [Daemon(binary, model, ["--role", "worker", "--coordinator", endpoint,
                                   "--worker-name", name, "--heartbeat-s", "0.2"])
            for name in names]


@pytest.fixture(scope="module")
def cluster():
    binary, model = spindled_and_model()
    # Two tenants: `local` (the token file the fixtures read) and `acme`.
    data_dir = Path(tempfile.mkdtemp(prefix="spdpy"))
    tokens = {"local": secrets.token_hex(32), "acme": secrets.token_hex(32)}
    (data_dir / "tokens.json").write_text(json.dumps(
        [{"token": t, "tenant": name} for name, t in tokens.items()]))
    (data_dir / "token").write_text(tokens["local"] + "\n")
    os.chmod(data_dir / "tokens.json", 0o600)
    coord = Daemon(binary, model, ["--role", "coordinator", "--worker-timeout-s", "3",
                                         "--spill-queue", "2", "--metrics-port", "-1",
                                         "--tenant-max-queued-tokens", "4000"], data_dir=data_dir)
    coord.tokens = tokens
    workers = start_workers(binary, model, coord, ["w0", "w1", "w2"])
    client = spindle.ServiceClient(coord.endpoint, token=coord.token)
    wait_for(lambda: sum(w["alive"] for w in client.cluster_status()["workers"]) == 3,
             what="three workers to join")
    yield coord, workers, client
    client.close()
    killed = [w for w in workers if w.proc.poll() is not None]
    codes = [w.stop() for w in workers if w not in killed]
    for w in killed:
        w.stop()  # removes its data dir
    assert codes == [0] * len(codes), codes  # SIGTERM drains and stops cleanly
    assert coord.stop() == 0, "".join(coord.log[-40:])


def by_name(client):
    return {w["name"]: w for w in client.cluster_status()["workers"]}


def test_status_lists_the_workers(cluster):
    coord, workers, client = cluster
    s = client.cluster_status()
    assert s["role"] == "coordinator"
    assert s["cluster_endpoint"].endswith("spindled-cluster.sock")
    names = sorted(w["name"] for w in s["workers"])
    assert names == ["w0", "w1", "w2"]
    for w in s["workers"]:
        assert w["alive"] and w["device"].startswith("cpu") and w["serving_slots"] > 0


def dp_data() -> list[types.Datum]:
    """Seven SFT data of different lengths (shards of unequal token counts)."""
    out = []
    for i in range(7):
        prompt = [BOS] + [20 + (3 * i + k) % 40 for k in range(4 + i)]
        completion = [60 + (5 * i + k) % 50 for k in range(6 + (2 * i) % 5)]
        out.append(sft_datum(prompt, completion))
    return out


def test_data_parallel_training_equals_one_worker_with_the_whole_batch(cluster):
    """data_parallel=3: every forward_backward is cut into three shards, one per worker, and
    the gradients are summed (Gloo, loopback TCP) before each optim_step. Losses, logprobs,
    grad norms and the saved weights equal a one-worker session's on the whole batch."""
    coord, workers, client = cluster
    base_model = client.get_server_capabilities().bases[0].id
    data = dp_data()
    adam = types.AdamParams(learning_rate=1e-2, grad_clip_norm=1.0)
    one = client.create_lora_training_client(base_model, rank=8, seed=11, policy="dp-one")
    before = {n: w["forwarded"] for n, w in by_name(client).items()}
    dp = client.create_lora_training_client(base_model, rank=8, seed=11, policy="dp-three",
                                            data_parallel=3)
    assert dp.info.data_parallel == 3 and one.info.data_parallel == 1
    listed = client.cluster_status()["data_parallel"]
    assert [(s["session_id"], len(s["workers"])) for s in listed] == [(dp.session_id, 3)]
    assert len(set(listed[0]["workers"])) == 3 and listed[0]["generation"] == 0
    cli = Path(os.environ["SPINDLED_BIN"]).with_name("spindle")
    if cli.is_file():  # `spindle cluster status` shows it too
        import subprocess
        status = [str(cli), "cluster", "status", "--endpoint", coord.endpoint, "--token",
                  coord.token]
        doc = json.loads(subprocess.run(status + ["--json"], capture_output=True, text=True,
                                        timeout=60, check=True).stdout)
        assert doc["data_parallel"][0]["workers"] == listed[0]["workers"]
        text = subprocess.run(status, capture_output=True, text=True, timeout=60, check=True).stdout
        assert f"data-parallel session {dp.session_id} (spindle://local/dp-three): 3 ranks" in text
    for step in range(4):
        batch = data if step != 2 else data[:2]  # two data for three ranks: one gets none
        a = one.forward_backward(batch, "cross_entropy").result()
        b = dp.forward_backward(batch, "cross_entropy").result()
        assert b.metrics["n_tokens:sum"] == a.metrics["n_tokens:sum"]
        assert b.metrics["loss:sum"] == pytest.approx(a.metrics["loss:sum"], rel=1e-4)
        assert len(b.loss_fn_outputs) == len(batch)  # in data order
        for x, y in zip(a.loss_fn_outputs, b.loss_fn_outputs):
            np.testing.assert_allclose(y["logprobs"].to_numpy(), x["logprobs"].to_numpy(),
                                       atol=2e-4)
        sa = one.optim_step(adam).result()
        sb = dp.optim_step(adam).result()
        assert sb.step == sa.step == step + 1
        assert sb.grad_norm == pytest.approx(sa.grad_norm, rel=1e-4)
    after = {n: w["forwarded"] for n, w in by_name(client).items()}
    assert all(after[n] > before.get(n, 0) for n in after), (before, after)  # all three ranks

    probe = types.ModelInput.from_ints([BOS] + list(range(30, 50)))
    lp_one = np.array(one.save_weights_and_get_sampling_client("dp-one-4")
                      .compute_logprobs(probe).result()[1:])
    lp_dp = np.array(dp.save_weights_and_get_sampling_client("dp-three-4")
                     .compute_logprobs(probe).result()[1:])
    initial = np.array(client.create_sampling_client(base_model=base_model)
                       .compute_logprobs(probe).result()[1:])
    assert np.max(np.abs(lp_one - initial)) > 1e-2  # it trained
    np.testing.assert_allclose(lp_dp, lp_one, atol=1e-4)

    # load_state reaches every rank: back to step 0's weights (a fresh session's save_state).
    fresh = client.create_lora_training_client(base_model, rank=8, seed=11, policy="dp-three-0")
    zero = fresh.save_state("zero").result()
    fresh.close()
    dp.load_state(zero.path).result()
    b = dp.forward_backward(data, "cross_entropy").result()
    c = one.forward_backward(data, "cross_entropy").result()  # trained: differs
    assert b.metrics["loss:sum"] != pytest.approx(c.metrics["loss:sum"], rel=1e-3)
    # A fork of a saved state on two ranks starts where the state is.
    forked = client.create_training_client_from_state(zero.path, policy="dp-fork", data_parallel=2)
    assert forked.info.data_parallel == 2
    z = forked.forward_backward(data, "cross_entropy").result()
    assert z.metrics["loss:sum"] == pytest.approx(b.metrics["loss:sum"], rel=1e-5)
    forked.close()
    dp.close()
    one.close()


def test_data_parallel_needs_enough_workers_and_a_coordinator(cluster, service):
    coord, workers, client = cluster
    base_model = client.get_server_capabilities().bases[0].id
    with pytest.raises(spindle.SpindleError) as e:
        client.create_lora_training_client(base_model, rank=4, data_parallel=4)
    assert e.value.code == "unavailable" and "needs 4 live workers" in str(e.value)
    with pytest.raises(spindle.SpindleError) as e:
        service.create_lora_training_client(base_model, rank=4, data_parallel=2)
    assert e.value.code == "failed_precondition" and "standalone" in str(e.value)
    with pytest.raises(spindle.SpindleError) as e:
        client.create_lora_training_client(base_model, rank=4, data_parallel=65)
    assert "data_parallel" in str(e.value)


def forwarded(client):
    return {n: w["forwarded"] for n, w in by_name(client).items()}


def grown(before, after):
    return sorted(n for n in after if after[n] > before.get(n, 0))


def test_sampling_routes_to_one_worker_and_spills_under_load(cluster):
    coord, workers, client = cluster
    base_model = client.get_server_capabilities().bases[0].id
    training = client.create_lora_training_client(base_model, rank=8, seed=11, policy="cl-hot")
    training.forward_backward([sft_datum([BOS, 30, 31], [60, 61, 62])], "cross_entropy")
    training.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    sampler = training.save_weights_and_get_sampling_client("hot")
    prompt = types.ModelInput.from_ints([BOS, 30, 31])
    greedy = types.SamplingParams(max_tokens=24, temperature=0.0, seed=0)

    # One at a time, the queue stays under --spill-queue: every request lands on one worker.
    before = forwarded(client)
    alone = [sampler.sample(prompt, 1, greedy).result().sequences[0].tokens for _ in range(5)]
    home = grown(before, forwarded(client))
    assert len(home) == 1, home
    assert all(t == alone[0] for t in alone)

    # 48 at once: the home worker's queue passes 2, so the policy gains a replica and requests
    # spill there; the replica serves the same revision (greedy output identical).
    before = forwarded(client)
    futures = [sampler.sample(prompt, 1, greedy) for _ in range(48)]
    results = [f.result().sequences[0].tokens for f in futures]
    assert all(t == alone[0] for t in results)
    spilled = grown(before, forwarded(client))
    assert len(spilled) == 2 and home[0] in spilled, (home, spilled)
    assert client.cluster_status()["replica_placements"] >= 1
    training.close()


def test_tenants_stay_apart_across_workers(cluster):
    coord, workers, client = cluster
    base_model = client.get_server_capabilities().bases[0].id
    acme = spindle.ServiceClient(coord.endpoint, token=coord.tokens["acme"])
    assert acme.server.tenant == "acme"
    # The same policy name in both tenants, trained on different data.
    prompt = [BOS, 50, 51, 52]
    mine = client.create_lora_training_client(base_model, rank=8, seed=1, policy="cl-same")
    theirs = acme.create_lora_training_client(base_model, rank=8, seed=1, policy="cl-same")
    for training, completion in ((mine, [70, 71, 72, 73]), (theirs, [90, 91, 92, 93])):
        for _ in range(3):
            training.forward_backward([sft_datum(prompt, completion)], "cross_entropy")
            training.optim_step(types.AdamParams(learning_rate=2e-2)).result()
    mine_s = mine.save_weights_and_get_sampling_client("v1")
    theirs_s = theirs.save_weights_and_get_sampling_client("v1")
    assert mine_s.model_path.startswith("spindle://local/cl-same@")
    assert theirs_s.model_path.startswith("spindle://acme/cl-same@")

    # Each tenant's sampler serves its own weights, wherever they are placed: the logprobs of a
    # sequence equal that tenant's session's forward, and differ from the other tenant's.
    seq = prompt + [70, 71, 72, 73]
    probe = types.ModelInput.from_ints(seq)
    lp_mine = np.array(mine_s.compute_logprobs(probe).result()[1:])
    lp_theirs = np.array(theirs_s.compute_logprobs(probe).result()[1:])
    fw_mine = mine.forward([sft_datum(prompt, seq[len(prompt):])]).result()
    fw_theirs = theirs.forward([sft_datum(prompt, seq[len(prompt):])]).result()
    np.testing.assert_allclose(lp_mine, fw_mine.loss_fn_outputs[0]["logprobs"].to_numpy(),
                               atol=1e-4)
    np.testing.assert_allclose(lp_theirs, fw_theirs.loss_fn_outputs[0]["logprobs"].to_numpy(),
                               atol=1e-4)
    assert lp_mine[-4:].sum() > lp_theirs[-4:].sum() + 1.0, (lp_mine, lp_theirs)

    # Another tenant's policy is indistinguishable from a missing one, through the coordinator.
    with pytest.raises(spindle.SpindleError) as err:
        acme.create_sampling_client(mine_s.model_path).sample(
            types.ModelInput.from_ints(prompt), 1, types.SamplingParams(max_tokens=2)).result()
    assert err.value.code == "not_found"
    mine.close()
    theirs.close()
    acme.close()


def metrics_text(coord) -> str:
    import urllib.request
    ready = [line for line in coord.log if "spindled ready" in line][0]
    url = next(part for part in ready.split() if part.startswith("http://"))
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.read().decode()


def counter(text: str, op: str, code: str) -> float:
    key = f'spindle_requests_total{{op="{op}",code="{code}"}}'
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(key))


def test_coordinator_counts_relayed_replies_and_holds_tenant_quotas(cluster):
    coord, workers, client = cluster
    base_model = client.get_server_capabilities().bases[0].id
    base = client.create_sampling_client(base_model=base_model)
    prompt = types.ModelInput.from_ints([BOS, 7, 8])
    before = metrics_text(coord)
    for seed in range(3):
        base.sample(prompt, 2, types.SamplingParams(max_tokens=8, seed=seed)).result()
    after = metrics_text(coord)
    # Served by workers, counted by the coordinator its clients talk to.
    assert counter(after, "sample", "ok") - counter(before, "sample", "ok") == 3

    # --tenant-max-queued-tokens 4000 holds across the cluster, at the coordinator: 64 x 64
    # sampled tokens are refused before they travel, naming the quota; other tenants are not
    # affected and the refused tenant's quota is whole again.
    with pytest.raises(spindle.SpindleError) as err:
        base.sample(prompt, 64, types.SamplingParams(max_tokens=64, seed=1)).result()
    assert err.value.code == "resource_exhausted"
    assert "tenant-max-queued-tokens" in str(err.value)
    out = base.sample(prompt, 40, types.SamplingParams(max_tokens=40, seed=1)).result()
    assert len(out.sequences) == 40
    assert counter(metrics_text(coord), "sample", "resource_exhausted") >= 1


def test_reward_test_samples_on_the_workers(cluster):
    coord, workers, client = cluster
    base_model = client.get_server_capabilities().bases[0].id
    spec = {"terms": [{"name": "pets", "plugin": "keywords", "weight": 2.0,
                       "config": {"present": ["cat", "dog"]}}]}
    rows = ["Once upon a time", "Lily saw a"]
    params = types.SamplingParams(max_tokens=16, temperature=1.0, seed=5)
    before = forwarded(client)
    r = client.reward_test(spec, rows, base_model, num_samples=4, sampling_params=params)
    after = forwarded(client)
    # One forwarded sample per row, to the worker the base's sampling is placed on.
    assert sum(after.values()) - sum(before.values()) == len(rows)
    assert len(r.samples) == 8
    for s in r.samples:
        lowered = s.text.lower()
        assert s.scores[0] == sum(w in lowered for w in ("cat", "dog")) / 2
    # The completions are what sampling the same prompt gives (same worker, same seed).
    tok = client.get_tokenizer(base_model)
    base = client.create_sampling_client(base_model=base_model)
    for i, row in enumerate(rows):
        direct = base.sample(types.ModelInput.from_ints(tok.encode(row)), 4, params).result()
        assert [s.tokens for s in r.samples if s.row == i] == [q.tokens for q in direct.sequences]


def test_training_routes_to_one_worker_and_survives_its_loss(cluster):
    coord, workers, client = cluster
    base_model = client.get_server_capabilities().bases[0].id
    prompt = [BOS] + list(range(20, 32))
    completion = list(range(40, 52))
    data = [sft_datum(prompt, completion)]
    before = {n: w["forwarded"] for n, w in by_name(client).items()}
    training = client.create_lora_training_client(base_model, rank=8, seed=3, policy="cl-sft")
    losses = []
    for _ in range(6):
        fb = training.forward_backward(data, "cross_entropy")
        training.optim_step(types.AdamParams(learning_rate=5e-3)).result()
        out = fb.result()
        losses.append(float(np.sum(out.loss_fn_outputs[0]["logprobs"].tolist())))
    after = {n: w["forwarded"] for n, w in by_name(client).items()}
    grew = [n for n in after if after[n] > before.get(n, 0)]
    assert len(grew) == 1, (before, after)  # the session is pinned to one worker
    home = grew[0]
    assert after[home] - before[home] >= 13  # create + 6 x (forward_backward + optim_step)

    saved = training.save_state("cl-step6").result()
    sampler = training.save_weights_and_get_sampling_client("cl-w6")
    greedy = types.SamplingParams(max_tokens=4, temperature=0.0, seed=0)
    first = sampler.sample(types.ModelInput.from_ints(prompt), 1, greedy).result()
    assert len(first.sequences[0].tokens) == 4

    # SIGKILL the session's worker: it is lost, and the next call restores the session on
    # another worker from the save_state revision, then runs.
    victim = next(w for w, n in zip(workers, ["w0", "w1", "w2"]) if n == home)
    victim.proc.send_signal(signal.SIGKILL)
    victim.proc.wait()
    wait_for(lambda: not by_name(client)[home]["alive"], what=f"{home} to be lost")
    fb = training.forward_backward(data, "cross_entropy").result()
    assert fb.metrics["n_tokens:sum"] == len(completion)
    step = training.optim_step(types.AdamParams(learning_rate=5e-3)).result()
    assert step is not None
    now = {n: w["forwarded"] for n, w in by_name(client).items()}
    assert any(now[n] > after[n] for n in now if n != home)

    # Every acknowledged revision reads back and samples, from a live worker.
    again = sampler.sample(types.ModelInput.from_ints(prompt), 1, greedy).result()
    assert again.sequences[0].tokens == first.sequences[0].tokens
    assert saved.path.startswith("spindle://")


def test_cli_cluster_status_json(cluster):
    coord, workers, client = cluster
    cli = Path(os.environ["SPINDLED_BIN"]).with_name("spindle")
    if not cli.is_file():
        pytest.skip(f"spindle CLI not built beside spindled ({cli})")
    import json
    import subprocess
    out = subprocess.run([str(cli), "cluster", "status", "--json", "--endpoint", coord.endpoint,
                          "--token", coord.token], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["role"] == "coordinator"
    assert {w["name"] for w in doc["workers"]} == {"w0", "w1", "w2"}
    assert all({"alive", "base", "device", "queue_depth", "placed_policies"} <= set(w)
               for w in doc["workers"])


def alive(client):
    return sorted(w["name"] for w in client.cluster_status()["workers"] if w["alive"])


def test_sampling_survives_a_worker_killed_mid_flight(cluster):
    coord, workers, client = cluster
    base_model = client.get_server_capabilities().bases[0].id
    sampler = client.create_sampling_client(base_model=base_model)
    prompt = types.ModelInput.from_ints([BOS, 11, 12])
    # 48 x (3 + 64) tokens stay under the fixture's --tenant-max-queued-tokens 4000.
    params = [types.SamplingParams(max_tokens=64, temperature=1.0, seed=i) for i in range(48)]
    expected = [sampler.sample(prompt, 1, p).result().sequences for p in params[:4]]
    live = {n for n, w in by_name(client).items() if w["alive"]}
    assert len(live) >= 2, live
    before = forwarded(client)
    retried = client.unavailable_retries
    futures = [sampler.sample(prompt, 1, p) for p in params]
    # Kill the live worker with the most of them in flight, while they run.
    wait_for(lambda: sum(forwarded(client).values()) - sum(before.values()) >= 16,
             what="the requests to reach the workers")
    depth = {n: w["queue_depth"] for n, w in by_name(client).items() if n in live}
    victim_name = max(depth, key=depth.get)
    victim = next(w for w, n in zip(workers, ["w0", "w1", "w2"]) if n == victim_name)
    victim.proc.send_signal(signal.SIGKILL)
    victim.proc.wait()
    # Every request completes: those in flight on the dead worker fail `unavailable` and the
    # SDK resends them (PROTOCOL.md "Unavailable") to a live worker; seeded sampling gives the
    # same completions wherever it runs.
    results = [f.result(timeout=120).sequences for f in futures]
    wait_for(lambda: not by_name(client)[victim_name]["alive"], what=f"{victim_name} to be lost")
    assert len(results) == 48
    for got, want in zip(results[:4], expected):
        assert [s.tokens for s in got] == [s.tokens for s in want]
    # The coordinator logs the loss; its output reaches coord.log through a reader thread, so
    # the line may land a moment after cluster_status already shows the worker gone.
    lost_lines = wait_for(
        lambda: [line for line in coord.log
                 if "cluster: worker" in line and f"'{victim_name}'" in line and " lost: " in line],
        what=f"the coordinator's log line saying {victim_name} was lost")
    in_flight = int(lost_lines[-1].split(" request(s) in flight")[0].rsplit(";", 1)[-1])
    assert client.unavailable_retries - retried >= in_flight


def test_coordinator_restart_recovers_and_workers_reregister():
    binary, model = spindled_and_model()
    coord_args = ["--role", "coordinator", "--worker-timeout-s", "3"]
    coord = Daemon(binary, model, coord_args)
    data_dir = coord.data_dir
    workers = start_workers(binary, model, coord, ["r0", "r1"])
    try:
        client = spindle.ServiceClient(coord.endpoint, token=coord.token)
        wait_for(lambda: alive(client) == ["r0", "r1"], what="two workers to join")
        base_model = client.get_server_capabilities().bases[0].id
        prompt = [BOS, 40, 41, 42]
        data = [sft_datum(prompt, [80, 81, 82, 83])]
        training = client.create_lora_training_client(base_model, rank=8, seed=2, policy="cl-restart")
        for _ in range(2):
            training.forward_backward(data, "cross_entropy")
            training.optim_step(types.AdamParams(learning_rate=1e-2)).result()
        state = training.save_state("two").result()
        sampler = training.save_weights_and_get_sampling_client("w2")
        probe = types.ModelInput.from_ints(prompt + [80, 81, 82, 83])
        before = sampler.compute_logprobs(probe).result()
        client.close()

        # SIGKILL: no drain, nothing flushed beyond what was acknowledged. The workers live on.
        coord.proc.send_signal(signal.SIGKILL)
        coord.proc.wait()
        coord.stop(remove=False)
        time.sleep(0.5)
        assert all(w.proc.poll() is None for w in workers)

        coord = Daemon(binary, model, coord_args, data_dir=data_dir)
        client = spindle.ServiceClient(coord.endpoint, token=coord.token)
        wait_for(lambda: alive(client) == ["r0", "r1"], what="the workers to re-register")
        # The acknowledged revisions are in the recovered catalog and serve from a worker.
        assert client.show(state.path).revision.has_state
        again = client.create_sampling_client(sampler.model_path).compute_logprobs(probe).result()
        np.testing.assert_allclose(again[1:], before[1:], atol=1e-5)
        # Training continues from the saved state on a worker: the same step.
        resumed = client.create_training_client_from_state_with_optimizer(state.path)
        assert resumed.info.step == 2
        out = resumed.forward_backward(data, "cross_entropy").result()
        assert out.metrics["n_tokens:sum"] == 4
        resumed.optim_step(types.AdamParams(learning_rate=1e-2)).result()
        resumed.close()
        client.close()
        assert "joined" in "".join(coord.log)
    finally:
        codes = [w.stop() for w in workers]
        code = coord.stop()
    assert codes == [0, 0] and code == 0, "".join(coord.log[-40:])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_workers_join_over_tcp_with_curve_only_when_allow_listed():
    binary, model = spindled_and_model()
    port = free_port()
    coord = Daemon(binary, model, ["--role", "coordinator",
                                   "--cluster-endpoint", f"tcp://127.0.0.1:{port}"])
    workers = []
    try:
        ready = [line for line in coord.log if "spindled ready" in line][0]
        assert ready.rstrip().endswith(f"tcp://127.0.0.1:{port}"), ready
        server_pub = coord.data_dir / "curve" / "server.pub"
        assert server_pub.is_file()
        client = spindle.ServiceClient(coord.endpoint, token=coord.token)
        common = ["--role", "worker", "--coordinator", f"tcp://127.0.0.1:{port}",
                  "--heartbeat-s", "0.2"]
        # A worker with the coordinator's key but not in its allow-list is refused by ZAP.
        workers.append(Daemon(binary, model, common + ["--worker-name", "t0",
                                                       "--coordinator-key", str(server_pub)]))
        # A worker with a wrong server key fails the CURVE handshake.
        wrong = "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7"
        workers.append(Daemon(binary, model, common + ["--worker-name", "t1",
                                                       "--coordinator-key", wrong]))
        time.sleep(2.0)
        assert client.cluster_status()["workers"] == []
        assert any("refus" in line or "denied" in line for line in coord.log), "".join(coord.log[-20:])

        # Allow-list both workers' keys (the file is re-read when it changes): only t0 joins.
        keys = [(w.data_dir / "curve" / "worker.pub").read_text().strip() for w in workers]
        allow = coord.data_dir / "curve" / "authorized_clients"
        allow.write_text("\n".join(keys) + "\n")
        wait_for(lambda: alive(client) == ["t0"], what="the allow-listed worker to join")
        time.sleep(1.0)
        assert alive(client) == ["t0"]  # the wrong server key never authenticates

        # Requests travel over the encrypted link.
        base_model = client.get_server_capabilities().bases[0].id
        training = client.create_lora_training_client(base_model, rank=4, seed=1, policy="cl-curve")
        out = training.forward_backward([sft_datum([BOS, 5, 6], [7, 8])], "cross_entropy").result()
        assert out.metrics["n_tokens:sum"] == 2
        assert by_name(client)["t0"]["forwarded"] >= 2
        training.close()
        client.close()
    finally:
        codes = [w.stop() for w in workers]
        code = coord.stop()
    assert codes == [0, 0] and code == 0, "".join(coord.log[-40:])


def test_grpo_run_spreads_over_workers_and_survives_a_kill():
    binary, model = spindled_and_model()
    coord = Daemon(binary, model, ["--role", "coordinator", "--worker-timeout-s", "2"])
    workers = start_workers(binary, model, coord, ["g0", "g1", "g2"])
    try:
        client = spindle.ServiceClient(coord.endpoint, token=coord.token)
        wait_for(lambda: alive(client) == ["g0", "g1", "g2"], what="three workers to join")

        def policy(word):
            return {"name": f"grpo-{word}", "rank": 4, "alpha": 8, "learning_rate": 1e-2,
                    "dataset": {"name": "inline", "prompts": ["Once upon a time", "One day"]},
                    "reward": {"terms": [{"name": word, "plugin": "keywords", "weight": 1,
                                          "config": {"present": [word]}}]}}
        steps = 24
        config = {"seed": 1, "steps": steps, "group_size": 4, "prompts_per_step": 2,
                  "max_tokens": 8, "eval_every": 0, "save_every": 2, "eval_prompts": 0,
                  "policies": [policy(w) for w in ("cat", "dog", "sun", "sky")]}
        started = client.start_run(config)

        # Every policy's session lives on a worker, spread over more than one.
        def sessions():
            return {n: w["sessions"] for n, w in by_name(client).items() if w["alive"]}
        wait_for(lambda: sum(sessions().values()) == 4, what="the run's four sessions")
        spread = sessions()
        assert sum(1 for v in spread.values() if v > 0) >= 2, spread
        wait_for(lambda: client.run_status(started.run_id).run.step >= 3, timeout=120,
                 what="the run to pass its first save")

        # SIGKILL a worker holding sessions mid-run: the run fails over to the live workers from
        # its last save and finishes.
        victim_name = max(spread, key=spread.get)
        victim = workers[int(victim_name[1])]
        victim.proc.send_signal(signal.SIGKILL)
        victim.proc.wait()
        st = finished_run(client, started.run_id)
        assert st.run.status == "done", st.run.error
        assert st.run.step == steps
        assert {(m.policy, m.step) for m in st.metrics} == {
            (p["name"], s) for p in config["policies"] for s in range(steps + 1)}
        assert any("failed over" in line for line in coord.log), "".join(coord.log[-30:])
        wait_for(lambda: sum(sessions().values()) == 0, timeout=10,
                 what="the run's sessions to close on the survivors")

        # Every acknowledged revision reads back, and the heads are the last step.
        for p in config["policies"]:
            address = f"spindle://local/{p['name']}"
            head = client.lineage(address)
            assert head.revision.step == steps
            revisions = [head.revision.id] + [e.revision.id for e in head.ancestors]
            assert len(revisions) >= steps // 2  # a save every 2 steps (a re-run save adds one)
            for rev in revisions:  # each blob reads back (checksum) and serves
                sampler = client.create_sampling_client(f"{address}@{rev}")
                out = sampler.sample(types.ModelInput.from_ints([BOS]), 1,
                                     types.SamplingParams(max_tokens=2, seed=1)).result()
                assert len(out.sequences[0].tokens) >= 1
        client.close()
    finally:
        codes = [w.stop() for w in workers if w.proc.poll() is None]
        for w in workers:
            w.stop()
        code = coord.stop()
    assert all(c == 0 for c in codes) and code == 0, "".join(coord.log[-40:])


def test_data_parallel_session_survives_a_worker_killed_mid_step():
    """A data-parallel session (2 ranks of 3 workers) whose rank is SIGKILLed: the call in flight
    fails `unavailable`, the next call reopens both ranks on the live workers from the last
    save_state, and training goes on exactly as a one-worker session resumed from that state."""
    binary, model = spindled_and_model()
    coord = Daemon(binary, model, ["--role", "coordinator", "--worker-timeout-s", "2",
                                   "--dp-timeout-s", "5"])
    names = ["d0", "d1", "d2"]
    workers = start_workers(binary, model, coord, names)
    try:
        client = spindle.ServiceClient(coord.endpoint, token=coord.token)
        wait_for(lambda: alive(client) == names, what="three workers to join")
        base_model = client.get_server_capabilities().bases[0].id
        data = dp_data()
        adam = types.AdamParams(learning_rate=1e-2)
        before = forwarded(client)
        dp = client.create_lora_training_client(base_model, rank=8, seed=5, policy="dp-kill",
                                                data_parallel=2)
        for _ in range(2):
            dp.forward_backward(data, "cross_entropy")
            dp.optim_step(adam).result()
        state = dp.save_state("two").result()
        now = forwarded(client)
        ranks = [n for n in names if now[n] > before.get(n, 0)]
        assert len(ranks) == 2, (before, now)

        # Kill one rank while the other waits in the step's gradient sum.
        dp.forward_backward(data, "cross_entropy").result()
        victim = workers[names.index(ranks[1])]
        victim.proc.send_signal(signal.SIGKILL)
        victim.proc.wait()
        with pytest.raises(spindle.SpindleError) as e:
            dp.optim_step(adam).result(timeout=60)
        assert e.value.code == "unavailable", e.value
        wait_for(lambda: not by_name(client)[ranks[1]]["alive"], what="the rank's worker lost")

        # The next calls reopen both ranks on d-live workers from `state` and train on.
        for _ in range(2):
            dp.forward_backward(data, "cross_entropy").result()
            assert dp.optim_step(adam).result().step in (3, 4)
        ref = client.create_training_client_from_state_with_optimizer(state.path)
        for _ in range(2):
            ref.forward_backward(data, "cross_entropy").result()
            ref.optim_step(adam).result()
        probe = types.ModelInput.from_ints([BOS] + list(range(30, 50)))
        lp_dp = np.array(dp.save_weights_and_get_sampling_client("dp-after")
                         .compute_logprobs(probe).result()[1:])
        lp_ref = np.array(ref.save_weights_and_get_sampling_client("ref-after")
                          .compute_logprobs(probe).result()[1:])
        np.testing.assert_allclose(lp_dp, lp_ref, atol=1e-4)
        assert any("data-parallel session" in line and "reopened" in line for line in coord.log)
        dp.close()
        ref.close()
        client.close()
    finally:
        for w in workers:
            w.stop()
        coord.stop()

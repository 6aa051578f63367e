"""SDK surface against a real spindled (stories260K): capabilities, connection defaults,
pipelining, asyncio, logprob consistency between sample / compute_logprobs / forward, typed
errors, save/load state and the catalog helpers."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest

import spindle
from spindle import types

from helpers import BOS, base_samples, sft_datum


def test_capabilities_status_and_handshake(service, base_model):
    caps = service.get_server_capabilities()
    assert base_model == "stories260K"
    base = caps.bases[0]
    assert (base.vocab_size, base.n_layers, base.dim) == (512, 5, 64)
    assert [m.model_name for m in caps.supported_models] == [b.id for b in caps.bases]
    assert {"cross_entropy", "importance_sampling", "ppo", "cispo", "dro"} <= set(caps.loss_fns)
    assert "J" in caps.encodings
    assert caps.limits.max_batch > 0 and caps.limits.max_num_samples > 0
    assert service.server.protocol_version == 1 and service.server.tenant == "local"
    assert service.status().server_version.startswith("spindled")


def test_defaults_come_from_the_data_dir(daemon, monkeypatch):
    monkeypatch.delenv("SPINDLE_ENDPOINT", raising=False)
    monkeypatch.delenv("SPINDLE_TOKEN", raising=False)
    monkeypatch.setenv("SPINDLE_DATA_DIR", str(daemon.data_dir))
    with spindle.ServiceClient() as client:
        assert client.endpoint == daemon.endpoint
        assert client.server.tenant == "local"


def test_wrong_token_is_unauthenticated(daemon):
    with pytest.raises(spindle.SpindleError) as err:
        spindle.ServiceClient(daemon.endpoint, token="0" * 64)
    assert err.value.code == "unauthenticated"


def test_bad_addresses_are_not_found(service):
    sampler = service.create_sampling_client(model_path="spindle://local/no-such-policy")
    with pytest.raises(spindle.SpindleError) as err:
        sampler.sample(types.ModelInput.from_ints([BOS]), 1, types.SamplingParams(seed=1)).result()
    assert err.value.code == "not_found"
    with pytest.raises(spindle.SpindleError) as err:
        service.show("spindle://local/no-such-policy")
    assert err.value.code == "not_found"


def test_pipelined_sampling_matches_one_at_a_time(service, base_model):
    sampler = service.create_sampling_client(base_model=base_model)
    prompt = types.ModelInput.from_ints([BOS])
    params = [types.SamplingParams(max_tokens=12, seed=s) for s in range(8)]
    futures = [sampler.sample(prompt, 2, p) for p in params]  # all in flight at once
    pipelined = [[s.tokens for s in f.result(timeout=120).sequences] for f in futures]
    for p, expected in zip(params[:3], pipelined[:3]):
        alone = sampler.sample(prompt, 2, p).result()
        assert [s.tokens for s in alone.sequences] == expected
    assert len({tuple(map(tuple, x)) for x in pipelined}) == 8  # different seeds, different text


def test_asyncio_variants(service, base_model):
    sampler = service.create_sampling_client(base_model=base_model)
    prompt = types.ModelInput.from_ints([BOS])

    async def main():
        samples = await asyncio.gather(*[
            sampler.sample_async(prompt, 1, types.SamplingParams(max_tokens=6, seed=s))
            for s in range(4)])
        training = await service.create_lora_training_client_async(base_model, rank=4, seed=1,
                                                                  policy="sdk-async")
        datum = sft_datum([BOS], samples[0].sequences[0].tokens)
        fb_future = await training.forward_backward_async([datum], "cross_entropy")
        step_future = await training.optim_step_async(types.AdamParams(learning_rate=1e-3))
        fb, step = await fb_future, await step_future.result_async()
        return samples, fb, step

    samples, fb, step = asyncio.run(main())
    expected = [sampler.sample(prompt, 1, types.SamplingParams(max_tokens=6, seed=s)).result()
                for s in range(4)]
    assert [s.sequences[0].tokens for s in samples] == [e.sequences[0].tokens for e in expected]
    assert fb.metrics["n_tokens:sum"] == 6 and step.step == 1


def test_logprobs_agree_across_sample_compute_and_forward(service, base_model):
    training = service.create_lora_training_client(base_model, rank=4, seed=5, policy="sdk-logprobs")
    base = service.create_sampling_client(base_model=base_model)
    story = base_samples(base, count=1, max_tokens=16, seed=21)[0]
    datum = sft_datum([BOS], story)
    training.forward_backward([datum], "cross_entropy")
    training.optim_step(types.AdamParams(learning_rate=1e-2)).result()  # weights != base
    sampler = training.save_weights_and_get_sampling_client("after-one-step")

    completion = sampler.sample(types.ModelInput.from_ints([BOS]), 1,
                                types.SamplingParams(max_tokens=10, seed=4)).result().sequences[0]
    tokens = [BOS] + completion.tokens
    computed = sampler.compute_logprobs(types.ModelInput.from_ints(tokens)).result()
    assert computed[0] is None and len(computed) == len(tokens)
    np.testing.assert_allclose(computed[1:], completion.logprobs, atol=1e-4)

    forward = training.forward([sft_datum([BOS], completion.tokens)], "cross_entropy").result()
    np.testing.assert_allclose(forward.loss_fn_outputs[0]["logprobs"].to_numpy(), computed[1:],
                               atol=1e-4)
    # Independent check of the loss: cross_entropy sums -log p over weighted tokens.
    assert forward.metrics["loss:sum"] == pytest.approx(-sum(computed[1:]), rel=1e-4)


def test_save_state_and_resume(service, base_model):
    training = service.create_lora_training_client(base_model, rank=4, seed=9, policy="sdk-state")
    datum = sft_datum([BOS], [300, 301, 302, 303, 304])
    for _ in range(2):
        training.forward_backward([datum], "cross_entropy")
        training.optim_step(types.AdamParams(learning_rate=1e-2))
    saved = training.save_state("two-steps").result()
    assert saved.path.startswith(training.policy_address + "@") and saved.bytes > 0
    assert service.show(saved.path).revision.has_state

    # Exact resume (Tinker's *_with_optimizer): the same policy, weights and AdamW state.
    resumed = service.create_training_client_from_state_with_optimizer(saved.path)
    assert resumed.info.step == 2 and resumed.policy_address == training.policy_address
    a = training.forward([datum]).result().loss_fn_outputs[0]["logprobs"].to_numpy()
    b = resumed.forward([datum]).result().loss_fn_outputs[0]["logprobs"].to_numpy()
    np.testing.assert_allclose(a, b, atol=1e-6)
    # Same optimizer state too: one more identical step keeps them identical.
    for client in (training, resumed):
        client.forward_backward([datum], "cross_entropy")
        client.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    a = training.forward([datum]).result().loss_fn_outputs[0]["logprobs"].to_numpy()
    b = resumed.forward([datum]).result().loss_fn_outputs[0]["logprobs"].to_numpy()
    np.testing.assert_allclose(a, b, atol=1e-6)

    fresh = service.create_lora_training_client(base_model, rank=4, seed=10, policy="sdk-state-2")
    info = fresh.load_state_with_optimizer(saved.path).result()
    assert info.step == 2 and info.path == saved.path
    c = fresh.forward([datum]).result().loss_fn_outputs[0]["logprobs"].to_numpy()
    assert not np.allclose(c, a, atol=1e-6)  # the 2-step weights, not the 3-step ones
    np.testing.assert_allclose(
        c, service.create_sampling_client(saved.path).compute_logprobs(
            types.ModelInput.from_ints(datum.model_input.to_ints() + [304])).result()[1:], atol=1e-4)
    resumed.close()
    fresh.close()


def test_catalog_helpers(service, base_model, tmp_path):
    training = service.create_lora_training_client(base_model, rank=4, seed=2, policy="sdk-cat",
                                                   description="catalog helper test policy")
    datum = sft_datum([BOS], [40, 41, 42])
    training.forward_backward([datum], "cross_entropy")
    training.optim_step(types.AdamParams(learning_rate=1e-2))
    rev1 = training.save_weights_for_sampler("one").result()
    training.forward_backward([datum], "cross_entropy")
    training.optim_step(types.AdamParams(learning_rate=1e-2))
    rev2 = training.save_weights_for_sampler("two", metrics_json=json.dumps({"loss": 1.0})).result()
    policy = training.policy_address
    assert policy.endswith("/sdk-cat") and rev2.path == f"{policy}@{rev2.revision_id}"

    listed = service.list_policies(name_prefix="sdk-cat")
    assert [p.name for p in listed.policies] == ["sdk-cat"] and listed.next_cursor == ""
    shown = service.show(policy)
    assert shown.policy.head == rev2.revision_id and shown.policy.base_id == base_model
    assert [r.id for r in shown.recent[:2]] == [rev2.revision_id, rev1.revision_id]
    assert shown.revision.parent == rev1.revision_id
    assert [h.name for h in service.search("catalog helper").policies] == ["sdk-cat"]

    lineage = service.lineage(rev2.path)
    assert lineage.revision.id == rev2.revision_id
    assert rev1.revision_id in [e.revision.id for e in lineage.ancestors]

    assert "good" in service.tag(policy, add=["good"]).policy.tags
    assert [p.name for p in service.list_policies(tag="good").policies] == ["sdk-cat"]

    fork = service.fork(rev1.path, "sdk-cat-fork")
    assert fork.policy.name == "sdk-cat-fork" and fork.policy.head == rev1.revision_id
    assert service.rollback(rev1.path).policy.head == rev1.revision_id

    exported = service.export_peft(rev2.path, tmp_path / "peft")
    assert exported.revision_id == rev2.revision_id
    assert json.loads((tmp_path / "peft" / "adapter_config.json").read_text())["r"] == 4
    imported = service.import_peft(tmp_path / "peft", "sdk-cat-imported")
    prompt = types.ModelInput.from_ints([BOS, 40, 41, 42])
    original = service.create_sampling_client(rev2.path).compute_logprobs(prompt).result()
    again = service.create_sampling_client(imported.address).compute_logprobs(prompt).result()
    np.testing.assert_allclose(again[1:], original[1:], atol=1e-5)

    service.delete(fork.policy.address)
    with pytest.raises(spindle.SpindleError) as err:
        service.show(fork.policy.address)
    assert err.value.code == "not_found"

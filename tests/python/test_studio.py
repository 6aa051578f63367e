"""The SDK's Studio ops against a real spindled (stories260K): reward_plugins / plugin_rescan
list the built-in plugins with versions and schemas, datasets lists the built-ins with
examples, SamplingClient.sample_stream's deltas concatenate to its final response which equals
sample() with the same seed, and subscribe() yields the tenant's GRPO metrics events and ends
with close()."""

from __future__ import annotations

import json

import pytest

import spindle
from spindle import types

BUILT_IN = {"countdown", "json_valid", "keywords", "length", "numeric_match", "regex"}


def test_reward_plugins_and_rescan(service):
    plugins = service.reward_plugins()
    names = [p.name for p in plugins]
    assert names == sorted(names)
    assert BUILT_IN <= set(names)
    for p in plugins:
        if p.name in BUILT_IN:
            assert p.version == "1.0.0"
            assert p.abi_version == 1
            assert json.loads(p.config_schema_json)["type"] == "object"
            assert p.path.endswith(f"spindle_reward_{p.name}.so")
    assert [p.name for p in service.plugin_rescan()] == names


def test_datasets(service):
    datasets = service.datasets(examples=2)
    assert [d.name for d in datasets] == ["arith", "gsm8k", "countdown"]
    arith = datasets[0]
    assert arith.available and arith.rows > 0 and arith.heldout_rows > 0
    assert len(arith.examples) == 2
    assert isinstance(arith.examples[0], types.RewardRow)
    assert arith.examples[0].prompt.endswith("=") and arith.examples[0].reference
    for d in datasets[1:]:
        if d.available:
            assert d.rows > 0 and len(d.examples) == 2 and d.examples[0].prompt
        else:
            assert d.error and d.examples == []
    assert all(d.examples == [] for d in service.datasets(examples=0))
    with pytest.raises(spindle.SpindleError) as e:
        service.datasets(examples=21)
    assert e.value.code == "limit_exceeded"


@pytest.mark.parametrize("temperature,seed", [(0.0, 0), (0.9, 77)])
def test_sample_stream_equals_sample(service, base_model, temperature, seed):
    sampler = service.create_sampling_client(base_model=base_model)
    prompt = types.ModelInput.from_ints([1, 403, 407])
    params = types.SamplingParams(max_tokens=20, temperature=temperature, seed=seed)
    want = sampler.sample(prompt, 2, params).result()
    tokens: dict[int, list[int]] = {0: [], 1: []}
    logprobs: dict[int, list[float]] = {0: [], 1: []}
    items = list(sampler.sample_stream(prompt, 2, params))
    assert isinstance(items[-1], types.SampleResponse)
    deltas = items[:-1]
    assert deltas and all(isinstance(d, types.SampleDelta) for d in deltas)
    text: dict[int, str] = {0: "", 1: ""}
    for d in deltas:
        assert len(d.pieces) == len(d.tokens)
        tokens[d.sequence] += d.tokens
        logprobs[d.sequence] += d.logprobs
        text[d.sequence] += "".join(d.pieces)
    got = items[-1]
    assert got == want
    for s in range(2):
        assert tokens[s] == want.sequences[s].tokens
        assert logprobs[s] == want.sequences[s].logprobs
        assert text[s] == want.sequences[s].text  # no stop: the pieces make the text
    # result() gives the same, and an error ends the stream.
    assert sampler.sample_stream(prompt, 2, params).result() == want
    other = service.create_sampling_client("spindle://somebody-else/p")
    with pytest.raises(spindle.SpindleError) as e:
        other.sample_stream(prompt, 1, params).result()
    assert e.value.code == "not_found"


def test_subscribe_sees_own_run_metrics(service):
    config = {"seed": 1, "steps": 2, "group_size": 2, "prompts_per_step": 2, "max_tokens": 8,
              "eval_every": 0, "save_every": 0, "eval_prompts": 0,
              "policies": [{"name": "py-events", "rank": 4, "alpha": 8, "learning_rate": 1e-2,
                            "dataset": {"name": "inline", "prompts": ["Once upon a time", "One day"]},
                            "reward": {"terms": [{"name": "cat", "plugin": "keywords",
                                                  "config": {"present": ["cat"]}}]}}]}
    with service.subscribe(["metrics"]) as sub:
        started = service.start_run(config)
        steps = set()
        while True:
            event = sub.next_event(timeout=300)
            assert event is not None and event.topic == "metrics"
            assert event.run.run.tenant == service.server.tenant
            if event.run.run.id != started.run_id:
                continue
            steps |= {m.step for m in event.run.metrics}
            if event.run.run.finished:
                break
        assert event.run.run.status == "done", event.run.run.error
        assert steps == {0, 1, 2}
    assert sub.closed
    leftover = []
    while (event := sub.next_event(timeout=10)) is not None:  # ends after "closed"
        leftover.append(event)
    assert all(e.topic == "metrics" for e in leftover)

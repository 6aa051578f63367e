"""A Qwen3-MoE and a DeepSeek-V3 (MLA) base end to end through a real spindled and the SDK:
`spindle make-base --experts 4 --top-k 2 [--arch deepseek_v3]` trains one from scratch (full-parameter, through the routed experts'
backward) and writes it as an HF directory; spindled serves it; sampling agrees with scoring;
a LoRA session with Tinker's default targets (attention, every routed expert's gate/up/down,
lm_head) learns a fixed completion, its saved revision (experts packed in the blob) scores it
exactly as the session did, and a policy forked from its saved state scores exactly as the session did."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest

import spindle
from spindle import types

from conftest import Daemon, spindled_and_model
from helpers import finished_run, mean_token_loss, sft_datum

BOS = 256  # the byte tokenizer's <|bos|>


@pytest.fixture(scope="module", params=["qwen3_moe", "deepseek_v3"])
def moe_daemon(request):
    binary, _ = spindled_and_model()
    cli = binary.parent / "spindle"
    if not cli.is_file():
        pytest.skip(f"spindle CLI not found beside spindled ({cli})")
    out = Path(tempfile.mkdtemp(prefix="spmoe")) / "base"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    arch = ["--arch", "deepseek_v3"] if request.param == "deepseek_v3" else []
    made = subprocess.run([str(cli), "make-base", "--out", str(out), "--experts", "4",
                           "--top-k", "2", "--steps", "150", "--target-accuracy", "1",
                           "--seed", "5", *arch], capture_output=True, text=True, env=env,
                          timeout=600)
    assert made.returncode == 0, made.stdout + made.stderr
    assert f"{request.param} dim 128, 4 experts (top 2)" in made.stdout, made.stdout
    config = json.loads((out / "config.json").read_text())
    if request.param == "deepseek_v3":
        # Latent attention, YaRN, the sigmoid group-limited router, a shared expert, layer 0
        # dense: every DeepSeek-V3 path of the engine, through the daemon.
        assert config["architectures"] == ["DeepseekV3ForCausalLM"]
        assert (config["n_routed_experts"], config["n_group"]) == (4, 2)
        assert config["kv_lora_rank"] > 0 and config["rope_scaling"]["rope_type"] == "yarn"
    else:
        assert config["architectures"] == ["Qwen3MoeForCausalLM"]
        assert (config["num_experts"], config["num_experts_per_tok"]) == (4, 2)
    d = Daemon(binary, out)
    yield d
    code = d.stop()
    assert code == 0, "spindled exited with %s on SIGTERM:\n%s" % (code, "".join(d.log[-40:]))


@pytest.fixture(scope="module")
def moe_service(moe_daemon):
    client = spindle.ServiceClient(moe_daemon.endpoint, token=moe_daemon.token)
    yield client
    client.close()


def prompt_of(text: str) -> list[int]:
    return [BOS] + list(text.encode())


def train(training, data, learning_rate: float, steps: int = 25) -> list[float]:
    """`steps` SFT steps (cross entropy, AdamW at `learning_rate`); each step's mean token loss."""
    losses = []
    for _ in range(steps):
        fb = training.forward_backward(data, "cross_entropy")
        step = training.optim_step(types.AdamParams(learning_rate=learning_rate))
        losses.append(mean_token_loss(fb.result()))
        step.result()
    return losses


def test_sampling_agrees_with_scoring(moe_service):
    base_id = moe_service.get_server_capabilities().bases[0].id
    base = moe_service.create_sampling_client(base_model=base_id)
    prompt = prompt_of("17+25=")
    greedy = types.SamplingParams(max_tokens=6, temperature=0.0, seed=0)
    first = base.sample(types.ModelInput.from_ints(prompt), 1, greedy).result().sequences[0]
    again = base.sample(types.ModelInput.from_ints(prompt), 1, greedy).result().sequences[0]
    assert first.tokens == again.tokens and len(first.tokens) >= 1
    # Decode through the KV cache (one token at a time) and one all-token forward agree.
    scored = base.compute_logprobs(types.ModelInput.from_ints(prompt + first.tokens)).result()
    np.testing.assert_allclose(scored[len(prompt):], first.logprobs, atol=2e-4)


def test_lora_on_the_experts_learns_and_its_revision_serves(moe_service):
    base_id = moe_service.get_server_capabilities().bases[0].id
    training = moe_service.create_lora_training_client(base_id, rank=8, seed=3, policy="moe-all")
    prompts = [prompt_of(p) for p in ("3+4=", "10+20=", "8+1=", "55+5=")]
    completion = list(b"zq#")  # far from anything the arithmetic base says
    data = [sft_datum(p, completion) for p in prompts]
    losses = train(training, data, learning_rate=1e-2)
    assert all(np.isfinite(losses))
    assert losses[-1] < 0.3 * losses[0], losses

    # The saved revision (experts packed in the blob, loaded into a serving slot) scores the
    # completion exactly as the session's live weights do.
    session = training.forward(data, "cross_entropy").result()
    trained = training.save_weights_and_get_sampling_client("moe-final")
    for i, prompt in enumerate(prompts):
        served = trained.compute_logprobs(types.ModelInput.from_ints(prompt + completion)).result()
        live = session.loss_fn_outputs[i]["logprobs"].tolist()
        np.testing.assert_allclose(served[-len(completion):], live[-len(completion):], atol=1e-4)

    # A policy forked from the saved state (the experts' packed LoRA read back from the blob)
    # scores the batch exactly as the session that saved it.
    state = training.save_state("moe-step25").result().path
    forked = moe_service.create_training_client_from_state(state, policy="moe-fork")
    outs = [c.forward_backward(data, "cross_entropy").result() for c in (training, forked)]
    assert mean_token_loss(outs[0]) == mean_token_loss(outs[1])


def test_attention_only_lora_learns(moe_service):
    base_id = moe_service.get_server_capabilities().bases[0].id
    training = moe_service.create_lora_training_client(base_id, rank=8, seed=3, train_mlp=False,
                                                       policy="moe-attn")
    prompts = [prompt_of(p) for p in ("3+4=", "10+20=", "8+1=", "55+5=")]
    completion = list(b"zq#")
    data = [sft_datum(p, completion) for p in prompts]
    losses = train(training, data, learning_rate=5e-3, steps=60)
    assert losses[-1] < 0.3 * losses[0], losses
    trained = training.save_weights_and_get_sampling_client("moe-attn-final")
    greedy = types.SamplingParams(max_tokens=len(completion), temperature=0.0, seed=0)
    got = trained.sample(types.ModelInput.from_ints(prompts[0]), 1, greedy).result()
    assert got.sequences[0].tokens == completion, got.sequences[0].tokens


def test_grpo_run_on_the_moe_base(moe_service):
    """A GRPO run (two policies, a reward plugin loaded by the daemon) on the MoE base: every
    step of every policy lands in the run's metrics and the run finishes."""
    def policy(word):
        return {"name": f"moe-grpo-{word}", "rank": 4, "alpha": 8, "learning_rate": 1e-2,
                "dataset": {"name": "inline", "prompts": ["3+4=", "10+20=", "8+1="]},
                "reward": {"terms": [{"name": word, "plugin": "keywords", "weight": 1,
                                      "config": {"present": [word]}}]}}
    steps = 4
    config = {"seed": 1, "steps": steps, "group_size": 4, "prompts_per_step": 2,
              "max_tokens": 4, "eval_every": 0, "save_every": 2, "eval_prompts": 0,
              "policies": [policy(w) for w in ("1", "2")]}
    st = finished_run(moe_service, moe_service.start_run(config).run_id)
    assert st.run.status == "done", st.run.error
    assert st.run.step == steps
    assert {(m.policy, m.step) for m in st.metrics} == {
        (p["name"], s) for p in config["policies"] for s in range(steps + 1)}

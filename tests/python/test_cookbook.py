"""The Tinker cookbook's loops on Spindle: recipes/sl_loop.py and recipes/rl_loop.py as the
cookbook writes them, with `import spindle as tinker` as the only change to their Tinker calls
(tests/python/cookbook/: the recipes and stand-ins for the cookbook helpers and packages they
import), against a real spindled on stories260K. The SL loop's NLL falls, the RL loop's reward
rises, checkpoints keep their ttl_seconds, and an interrupted SL run resumed from its last
checkpoint reproduces the uninterrupted run."""

from __future__ import annotations

import json
import sys
from collections import Counter
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest

import spindle as tinker

torch = pytest.importorskip("torch", reason="the cookbook's loops build tensors with torch")
sys.path.insert(0, str(Path(__file__).resolve().parent / "cookbook"))

import datasets  # noqa: E402  (the stand-in in tests/python/cookbook)
from tinker_cookbook import renderers, tokenizer_utils  # noqa: E402
from tinker_cookbook.recipes import rl_loop, sl_loop  # noqa: E402
from tinker_cookbook.utils.git_rev import recipe_user_metadata  # noqa: E402

CONVERSATIONS = [
    ("Who is Lily?", "Lily is a little girl with a red ball."),
    ("What does Tom like?", "Tom likes to play in the park with his dog."),
    ("Where is the cat?", "The cat is under the big green tree."),
    ("What did Sue eat?", "Sue ate a sweet apple and smiled."),
]
STORY_SUBJECTS = ["a cat", "a girl", "a bird", "a boy"]


@pytest.fixture
def cookbook(daemon, monkeypatch):
    """The environment a cookbook script finds: the daemon's token for the ServiceClient it
    builds from base_url, and SPINDLE_ENDPOINT for the tokenizer stand-in."""
    monkeypatch.setenv("SPINDLE_ENDPOINT", daemon.endpoint)
    monkeypatch.setenv("SPINDLE_TOKEN", daemon.token)
    tokenizer_utils._service = None
    yield daemon
    if tokenizer_utils._service is not None:
        tokenizer_utils._service.close()
        tokenizer_utils._service = None


def metrics_rows(log_path: Path) -> list[dict]:
    return [json.loads(line) for line in (log_path / "metrics.jsonl").read_text().splitlines()]


def checkpoint_rows(log_path: Path) -> list[dict]:
    return [json.loads(line) for line in (log_path / "checkpoints.jsonl").read_text().splitlines()]


def register_sl_data(copies: int = 8) -> None:
    rows = [{"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]}
            for q, a in CONVERSATIONS] * copies
    datasets.register("HuggingFaceH4/no_robots", {"train": rows})


def test_sl_loop_nll_falls_and_checkpoints_keep_their_ttl(cookbook, tmp_path):
    register_sl_data()
    config = sl_loop.Config(base_url=cookbook.endpoint, log_path=str(tmp_path))
    sl_loop.main(config)

    rows = metrics_rows(tmp_path)
    nll = [r["train_mean_nll"] for r in rows]
    print(f"sl_loop: train_mean_nll {np.round(nll, 3)}")
    assert [r["step"] for r in rows] == list(range(8))
    assert all(np.isfinite(nll)) and np.isfinite(rows[-1]["train_mean_bpb"])
    assert nll[-1] < 0.5 * nll[0], nll
    # OptimStepResponse.metrics reached the log: the optimizer's step count and gradient norm.
    assert [r["optim/step"] for r in rows] == list(range(1, 9))
    assert all(r["optim/grad_norm"] > 0 for r in rows)

    records = checkpoint_rows(tmp_path)
    assert [r["name"] for r in records] == ["000003", "000006", "final"]
    service = tinker.ServiceClient(base_url=cookbook.endpoint)
    rest = service.create_rest_client()
    run = rest.get_training_run_by_tinker_path(records[-1]["state_path"]).result()
    assert run.user_metadata == recipe_user_metadata("recipe_sl_loop")
    assert run.base_model == "stories260K" and run.lora_rank == 8
    listed = {c.tinker_path: c for c in rest.list_checkpoints(run.training_run_id).result().checkpoints}
    periodic = listed[records[0]["state_path"]]
    assert periodic.checkpoint_type == "training" and periodic.expires_at is not None
    assert abs(periodic.expires_at - periodic.time - timedelta(seconds=600)) < timedelta(seconds=5)
    final_state, final_sampler = listed[records[-1]["state_path"]], listed[records[-1]["sampler_path"]]
    assert (final_state.checkpoint_type, final_state.expires_at) == ("training", None)
    assert (final_sampler.checkpoint_type, final_sampler.expires_at) == ("sampler", None)
    assert run.last_checkpoint.tinker_path == final_state.tinker_path
    service.close()


def test_interrupted_sl_loop_resumes_exactly(cookbook, tmp_path):
    register_sl_data()
    config = sl_loop.Config(base_url=cookbook.endpoint, log_path=str(tmp_path), max_steps=6)
    sl_loop.main(config)
    uninterrupted = {r["step"]: r for r in metrics_rows(tmp_path)}
    assert sorted(uninterrupted) == list(range(6))

    # The run "died" after step 5, before its final checkpoint: resuming finds step 3's.
    records = checkpoint_rows(tmp_path)
    (tmp_path / "checkpoints.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in records if r["name"] != "final"))
    (tmp_path / "metrics.jsonl").unlink()
    sl_loop.main(config)
    resumed = {r["step"]: r for r in metrics_rows(tmp_path)}
    assert sorted(resumed) == [3, 4, 5]
    for step in (3, 4, 5):
        a, b = uninterrupted[step], resumed[step]
        assert b["train_mean_nll"] == pytest.approx(a["train_mean_nll"], rel=1e-5, abs=1e-6), step
        assert b["optim/grad_norm"] == pytest.approx(a["optim/grad_norm"], rel=1e-4), step
    # The optimizer's own step count continues from the checkpoint (3 steps done before it).
    assert [resumed[s]["optim/step"] for s in (3, 4, 5)] == [4, 5, 6]


def choose_answer(endpoint: str, config: rl_loop.Config) -> tuple[str, float]:
    """A word the base puts in about a third of its stories for these prompts, so the reward
    has signal at the start and room to grow."""
    service = tinker.ServiceClient(base_url=endpoint)
    sampler = service.create_sampling_client(base_model=config.model_name)
    renderer = renderers.get_renderer("role_colon", sampler.get_tokenizer())
    params = tinker.SamplingParams(max_tokens=config.max_tokens, stop=renderer.get_stop_sequences(),
                                   seed=7)
    presence: Counter = Counter()
    total = 0
    for subject in STORY_SUBJECTS:
        prompt = renderer.build_generation_prompt([
            {"role": "user", "content": f"Tell me a story about {subject}. Tell it in one sentence."}])
        for seq in sampler.sample(prompt, 32, params).result().sequences:
            content = renderers.get_text_content(renderer.parse_response(seq.tokens)[0])
            presence.update({w for w in rl_loop.words(content) if len(w) > 2})
            total += 1
    service.close()
    word, count = min(presence.items(), key=lambda kv: abs(kv[1] / total - 0.3))
    return word, count / total


def test_rl_loop_reward_rises(cookbook, tmp_path):
    config = rl_loop.Config(base_url=cookbook.endpoint, log_path=str(tmp_path), learning_rate=1e-2)
    answer, base_rate = choose_answer(cookbook.endpoint, config)
    rows = [{"question": f"Tell me a story about {s}.", "answer": answer} for s in STORY_SUBJECTS]
    datasets.register("spindle/story-words", {"train": rows * 10})
    rl_loop.main(config)

    metrics = metrics_rows(tmp_path)
    rewards = [r["reward/total"] for r in metrics]
    print(f"rl_loop: answer {answer!r} (base rate {base_rate:.2f}), rewards {np.round(rewards, 2)}")
    assert len(rewards) == 10
    first, last = np.mean(rewards[:3]), np.mean(rewards[-3:])
    assert last > first + 0.25, (answer, base_rate, rewards)

    records = checkpoint_rows(tmp_path)
    assert [r["name"] for r in records] == ["000004", "000008", "final"]
    service = tinker.ServiceClient(base_url=cookbook.endpoint)
    rest = service.create_rest_client()
    run = rest.get_training_run_by_tinker_path(records[-1]["sampler_path"]).result()
    assert run.user_metadata == recipe_user_metadata("recipe_rl_loop")
    checkpoints = rest.list_checkpoints(run.training_run_id).result().checkpoints
    by_path = {c.tinker_path: c for c in checkpoints}
    assert by_path[records[0]["state_path"]].expires_at is not None          # ttl_seconds=600
    assert by_path[records[-1]["state_path"]].expires_at is None             # ttl_seconds=None
    # Every round's save_weights_and_get_sampling_client revision is ephemeral (about 1 h).
    ephemeral = [c for c in checkpoints if c.checkpoint_type == "sampler" and c.expires_at]
    assert len(ephemeral) >= 10
    assert all(timedelta(minutes=59) < c.expires_at - c.time < timedelta(minutes=61)
               for c in ephemeral)
    service.close()

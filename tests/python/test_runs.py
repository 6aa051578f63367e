"""GRPO runs through the SDK against a real spindled (stories260K, keywords reward plugin):
start, poll to the end, the metrics timeline, listing, stop/resume refusals, fork + resume."""

from __future__ import annotations

import time

import pytest

import spindle


def keyword_config(prefix: str, steps: int) -> dict:
    def policy(name: str, word: str) -> dict:
        return {"name": f"{prefix}-{name}", "rank": 4, "alpha": 8, "learning_rate": 1e-2,
                "dataset": {"name": "inline", "prompts": ["Once upon a time", "One day"]},
                "reward": {"terms": [{"name": word, "plugin": "keywords", "weight": 1,
                                      "config": {"present": [word]}}]}}
    return {"seed": 1, "steps": steps, "group_size": 4, "prompts_per_step": 2, "max_tokens": 8,
            "eval_every": 0, "save_every": 0, "eval_prompts": 0,
            "policies": [policy("cat", "cat"), policy("dog", "dog")]}


def wait_finished(service, run_id: str, timeout_s: float = 300) -> spindle.types.RunStatus:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        st = service.run_status(run_id)
        if st.run.finished:
            return st
        time.sleep(0.1)
    pytest.fail(f"run {run_id} did not finish")


def test_run_start_status_list_and_fork(service):
    started = service.start_run(keyword_config("py", 2))
    assert len(started.run_id) == 16
    assert started.policies == ["spindle://local/py-cat", "spindle://local/py-dog"]
    st = wait_finished(service, started.run_id)
    assert st.run.status == "done", st.run.error
    assert st.run.step == 2
    steps = {(m.policy, m.step) for m in st.metrics}
    assert steps == {(p, s) for p in ("py-cat", "py-dog") for s in range(3)}
    trained = [m for m in st.metrics if m.step > 0]
    assert all(0.0 <= m.metrics["reward_mean"] <= 1.0 for m in trained)
    assert len(service.run_status(started.run_id, metrics_since_step=2).metrics) == 2
    assert started.run_id in [r.id for r in service.list_runs().runs]

    with pytest.raises(spindle.SpindleError) as err:
        service.resume_run(started.run_id)
    assert err.value.code == "failed_precondition"
    with pytest.raises(spindle.SpindleError) as err:
        service.start_run(keyword_config("py", 2))
    assert err.value.code == "already_exists"

    # Fork a run from a revision: fork each policy, then start with resume=True.
    for name in ("cat", "dog"):
        service.fork(f"spindle://local/py-{name}@latest", f"fork-{name}")
    forked = service.start_run(keyword_config("fork", 4), resume=True)
    st = wait_finished(service, forked.run_id)
    assert st.run.status == "done", st.run.error
    assert {m.step for m in st.metrics} == {3, 4}  # continued after the forked revision (step 2)
    assert service.show("spindle://local/fork-cat").revision.step == 4

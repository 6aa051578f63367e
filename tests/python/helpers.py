"""Shared helpers for the daemon-backed SDK tests (token data built from real base samples)."""

from __future__ import annotations

import time

import numpy as np

from spindle import types

BOS = 1
EOS = 2


def base_samples(sampler, count: int, max_tokens: int, seed: int, prompt=(BOS,)) -> list[list[int]]:
    """`count` completions of `prompt` that ran to max_tokens without a stop token."""
    params = types.SamplingParams(max_tokens=max_tokens, temperature=1.0, seed=seed)
    result = sampler.sample(types.ModelInput.from_ints(list(prompt)), 16, params).result()
    full = [s.tokens for s in result.sequences
            if len(s.tokens) == max_tokens and BOS not in s.tokens and EOS not in s.tokens]
    assert len(full) >= count, f"only {len(full)} of 16 base samples ran to {max_tokens} tokens"
    return full[:count]


def sft_datum(prompt: list[int], completion: list[int]) -> types.Datum:
    """Tinker-cookbook next-token datum: input = tokens[:-1], targets = tokens[1:], weights 0 on
    the targets that are still prompt."""
    tokens = prompt + completion
    weights = np.array([0.0] * (len(prompt) - 1) + [1.0] * len(completion), dtype=np.float32)
    return types.Datum(model_input=types.ModelInput.from_ints(tokens[:-1]),
                       loss_fn_inputs={"target_tokens": tokens[1:], "weights": weights})


def mean_token_loss(output) -> float:
    return output.metrics["loss:sum"] / output.metrics["n_tokens:sum"]


def finished_run(client, run_id: str, timeout: float = 300.0):
    """Polls run_status until the run finishes (a failed assertion after `timeout` seconds);
    returns the final status."""
    deadline = time.monotonic() + timeout
    while not (status := client.run_status(run_id)).run.finished:
        assert time.monotonic() < deadline, f"run {run_id} did not finish in {timeout:.0f} s"
        time.sleep(0.2)
    return status

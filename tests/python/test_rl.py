"""A Tinker-cookbook RL loop through the SDK against a real spindled (stories260K): group
sampling from the current sampler revision, reward = fraction of a chosen target token in the
completion, group-centred advantages, importance_sampling loss with the sampler's logprobs,
optim_step, then save_weights_and_get_sampling_client for the next round."""

from __future__ import annotations

from collections import Counter

import numpy as np

from spindle import types

from helpers import BOS

ROUNDS = 12
GROUPS = 4
GROUP_SIZE = 8
MAX_TOKENS = 8
LEARNING_RATE = 2e-2


def choose_target(base, prompts) -> tuple[int, float]:
    """A token the base emits sometimes (about 5-15 % of completion tokens), so the reward
    has signal at the start and room to grow."""
    counts: Counter = Counter()
    total = 0
    for i, prompt in enumerate(prompts):
        result = base.sample(types.ModelInput.from_ints(prompt), 16,
                             types.SamplingParams(max_tokens=MAX_TOKENS, seed=1000 + i)).result()
        for seq in result.sequences:
            counts.update(t for t in seq.tokens if t > 2)
            total += len(seq.tokens)
    token, n = min(counts.items(), key=lambda kv: abs(kv[1] / total - 0.08))
    return token, n / total


def rl_round(training, sampler, prompts, target, seed):
    """Returns the round's mean reward and the importance ratio check (max |log ratio|)."""
    futures = [sampler.sample(types.ModelInput.from_ints(p), GROUP_SIZE,
                              types.SamplingParams(max_tokens=MAX_TOKENS, seed=seed * 100 + g))
               for g, p in enumerate(prompts)]
    data, rewards = [], []
    for prompt, future in zip(prompts, futures):
        group = future.result().sequences
        r = np.array([np.mean([t == target for t in s.tokens]) if s.tokens else 0.0 for s in group])
        rewards.extend(r)
        advantages = r - r.mean()
        for seq, adv in zip(group, advantages):
            if not seq.tokens or adv == 0.0:
                continue
            tokens = prompt + seq.tokens
            pad = len(prompt) - 1
            data.append(types.Datum(
                model_input=types.ModelInput.from_ints(tokens[:-1]),
                loss_fn_inputs={"target_tokens": tokens[1:],
                                "logprobs": [0.0] * pad + seq.logprobs,
                                "advantages": [0.0] * pad + [float(adv)] * len(seq.tokens),
                                "weights": [0.0] * pad + [1.0] * len(seq.tokens)}))
    max_log_ratio = 0.0
    if data:
        out = training.forward_backward(data, "importance_sampling").result()
        for datum, o in zip(data, out.loss_fn_outputs):
            q = datum.loss_fn_inputs["logprobs"].to_numpy()
            w = datum.loss_fn_inputs["weights"].to_numpy()
            p = o["logprobs"].to_numpy()
            max_log_ratio = max(max_log_ratio, float(np.max(np.abs(p - q)[w > 0])))
        training.optim_step(types.AdamParams(learning_rate=LEARNING_RATE)).result()
    return float(np.mean(rewards)), max_log_ratio


def test_rl_raises_reward_of_target_token(service, base_model):
    base = service.create_sampling_client(base_model=base_model)
    opening = base.sample(types.ModelInput.from_ints([BOS]), 1,
                          types.SamplingParams(max_tokens=3, temperature=0.0)).result()
    prompts = [[BOS] + opening.sequences[0].tokens[:k] for k in range(GROUPS)]
    target, base_rate = choose_target(base, prompts)

    training = service.create_lora_training_client(base_model, rank=8, seed=3, policy="rl-test")
    sampler = training.save_weights_and_get_sampling_client("round-0")
    rewards, ratios = [], []
    for round_index in range(ROUNDS):
        reward, max_log_ratio = rl_round(training, sampler, prompts, target, seed=round_index + 1)
        rewards.append(reward)
        ratios.append(max_log_ratio)
        sampler = training.save_weights_and_get_sampling_client(f"round-{round_index + 1}")

    # On-policy: the sampler's logprobs are the trainer's for the same weights (ratio 1).
    assert max(ratios) < 1e-3, ratios
    first, last = np.mean(rewards[:3]), np.mean(rewards[-3:])
    print(f"rl: target {target} (base rate {base_rate:.3f}), rewards {np.round(rewards, 3)}, "
          f"max |log ratio| {max(ratios):.2e}")
    assert last > first + 0.4 and last > 2 * first, (target, base_rate, rewards)

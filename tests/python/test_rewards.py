"""ServiceClient.reward_test against a real spindled (stories260K, the keywords plugin): every
sample's score equals a Python re-implementation of keywords' documented rule on the returned
text, the distribution equals numpy statistics of those scores, rows given three ways, and a
spec that does not validate fails before sampling with the term named."""

from __future__ import annotations

import numpy as np
import pytest

import spindle
from spindle import types

SPEC = {"terms": [{"name": "pets", "plugin": "keywords", "weight": 2.0,
                   "config": {"present": ["cat", "dog"]}}]}


def keywords_fraction(text: str, words: list[str]) -> float:
    """keywords' mode "fraction" with only present words: found / |present|, case-insensitive
    substring match (plugins/keywords)."""
    lowered = text.lower()
    return sum(1 for w in words if w in lowered) / len(words)


def histogram(values: np.ndarray, bins: int) -> list[int]:
    """summary.h's rule: equal-width bins over [min, max], the max in the last bin."""
    lo, hi = float(values.min()), float(values.max())
    width = (hi - lo) / bins
    out = [0] * bins
    for v in values:
        b = int((float(v) - lo) / width) if width > 0 else 0
        out[min(b, bins - 1)] += 1
    return out


def test_reward_test_scores_and_distribution(service, base_model):
    rows = ["Once upon a time",
            {"prompt": "Lily saw a", "reference": "a cat", "metadata": {"id": 2}},
            types.RewardRow(prompt="One day, Tom", metadata='{"topic": "dogs"}')]
    params = types.SamplingParams(max_tokens=24, temperature=1.0, seed=11)
    r = service.reward_test(SPEC, rows, base_model, num_samples=6, sampling_params=params, bins=4)
    assert r.revision_id == ""
    assert [(t.name, t.plugin, t.weight) for t in r.terms] == [("pets", "keywords", 2.0)]
    assert len(r.samples) == 18
    assert [s.row for s in r.samples] == [i // 6 for i in range(18)]

    expected = np.array([keywords_fraction(s.text, ["cat", "dog"]) for s in r.samples])
    got = np.array([s.scores[0] for s in r.samples])
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(np.array([s.total for s in r.samples]), 2.0 * expected)
    for s in r.samples:
        assert 1 <= len(s.tokens) <= 24 and s.stop_reason in ("stop", "length")
        assert r.scores_by_term(s) == {"pets": s.scores[0]}

    totals = 2.0 * expected
    for dist, values in ((r.terms[0].scores, expected), (r.total, totals)):
        assert dist.n == 18
        assert dist.mean == pytest.approx(values.mean(), abs=1e-12)
        assert dist.std == pytest.approx(values.std(), abs=1e-12)  # population std
        assert (dist.min, dist.max) == (values.min(), values.max())
        assert dist.histogram == histogram(values, 4)


def test_reward_test_is_reproducible(service, base_model):
    params = types.SamplingParams(max_tokens=12, temperature=0.8, seed=3)
    a = service.reward_test(SPEC, ["Once upon a time"], base_model, 3, params)
    b = service.reward_test(SPEC, ["Once upon a time"], base_model, 3, params)
    assert [s.tokens for s in a.samples] == [s.tokens for s in b.samples]
    assert [s.total for s in a.samples] == [s.total for s in b.samples]


def test_reward_test_errors(service, base_model):
    bad = {"terms": [{"name": "kw", "plugin": "keywords", "config": {"presnt": ["cat"]}}]}
    with pytest.raises(spindle.SpindleError) as err:
        service.reward_test(bad, ["Once"], "spindle://local/no-such-policy")
    assert err.value.code == "invalid_argument"
    assert "term 'kw'" in str(err.value) and "presnt" in str(err.value)
    with pytest.raises(spindle.SpindleError) as err:
        service.reward_test(SPEC, ["Once"], "spindle://local/no-such-policy")
    assert err.value.code == "not_found"
    with pytest.raises(spindle.SpindleError) as err:
        service.reward_test(SPEC, ["Once"] * 20, base_model, num_samples=64)
    assert err.value.code == "limit_exceeded" and "max_reward_test_samples" in str(err.value)

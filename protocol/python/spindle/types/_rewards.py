"""reward_test types (op reward_test; PROTOCOL.md "Reward test")."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .. import _wire


@dataclass
class RewardRow:
    """One prompt row: what a JSONL data row gives the reward plugins. metadata: a dict (or
    JSON object text) the plugins see as the item's metadata."""
    prompt: str
    reference: str = ""
    metadata: dict[str, Any] | str | None = None


@dataclass
class RewardDistribution:
    """Population statistics of n scores; histogram: equal-width bins over [min, max] (all in
    bin 0 when min == max)."""
    n: int = 0
    mean: float = 0.0
    std: float = 0.0
    min: float = 0.0
    max: float = 0.0
    histogram: list[int] = field(default_factory=list)


@dataclass
class RewardTermSummary:
    name: str = ""
    plugin: str = ""
    weight: float = 1.0
    scores: RewardDistribution = field(default_factory=RewardDistribution)  # unweighted


@dataclass
class RewardSample:
    """One sampled completion and its scores (per term, unweighted, in spec order)."""
    row: int = 0  # index into the request's rows
    tokens: list[int] = field(default_factory=list)
    text: str = ""
    stop_reason: str = ""  # "stop" | "length"
    scores: list[float] = field(default_factory=list)
    infos: list[str] = field(default_factory=list)
    total: float = 0.0  # sum of weight x score


@dataclass
class RewardTestResponse:
    revision_id: str = ""  # "" = the base model
    terms: list[RewardTermSummary] = field(default_factory=list)
    total: RewardDistribution = field(default_factory=RewardDistribution)
    samples: list[RewardSample] = field(default_factory=list)  # row-major

    def scores_by_term(self, sample: RewardSample) -> dict[str, float]:
        return {t.name: s for t, s in zip(self.terms, sample.scores)}


def _distribution(obj: dict) -> RewardDistribution:
    return RewardDistribution(n=int(obj.get("n", 0)), mean=float(obj.get("mean", 0.0)),
                              std=float(obj.get("std", 0.0)), min=float(obj.get("min", 0.0)),
                              max=float(obj.get("max", 0.0)),
                              histogram=[int(h) for h in obj.get("histogram", [])])


def reward_test_response(reply: "_wire.Reply") -> RewardTestResponse:
    body = reply.body
    terms = [RewardTermSummary(name=str(t.get("name", "")), plugin=str(t.get("plugin", "")),
                               weight=float(t.get("weight", 1.0)),
                               scores=_distribution(t.get("scores", {})))
             for t in body.get("terms", [])]
    samples = []
    for i, s in enumerate(body.get("samples", [])):
        tokens = _wire.read_tensor(s["tokens"], reply.frames, f"samples[{i}].tokens")
        samples.append(RewardSample(row=int(s.get("row", 0)), tokens=[int(t) for t in tokens],
                                    text=str(s.get("text", "")),
                                    stop_reason=str(s.get("stop_reason", "")),
                                    scores=[float(v) for v in s.get("scores", [])],
                                    infos=[str(v) for v in s.get("infos", [])],
                                    total=float(s.get("total", 0.0))))
    return RewardTestResponse(revision_id=str(body.get("revision_id", "")), terms=terms,
                              total=_distribution(body.get("total", {})), samples=samples)

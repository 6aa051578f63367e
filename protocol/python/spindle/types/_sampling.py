"""Sampling types (Tinker's SamplingParams, SampleResponse, SampledSequence)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence, Union


@dataclass
class SamplingParams:
    """max_tokens: completion length bound; top_k <= 0 or None = off; top_p = 1 = off;
    seed None = a fresh random seed per request (the SDK draws it, so the request stays
    reproducible from the daemon's log); stop: token ids (int) and/or strings, or one string.
    A stop token is kept in the returned tokens; a stop string is cut from the text."""
    max_tokens: int = 16
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float = 1.0
    seed: int | None = None
    stop: Union[str, Sequence[Union[str, int]], None] = None

    def stop_token_ids(self) -> list[int]:
        if self.stop is None or isinstance(self.stop, str):
            return []
        return [int(s) for s in self.stop if not isinstance(s, str)]

    def stop_strings(self) -> list[str]:
        if self.stop is None:
            return []
        if isinstance(self.stop, str):
            return [self.stop]
        return [s for s in self.stop if isinstance(s, str)]


@dataclass
class SampledSequence:
    """tokens: the completion's ids (a stop token included); logprobs: raw log p of each
    (before temperature/top-k/top-p); stop_reason: "stop" | "length"; text: decoded completion."""
    tokens: list[int]
    logprobs: list[float]
    stop_reason: str = ""
    text: str = ""


@dataclass
class SampleResponse:
    sequences: list[SampledSequence] = field(default_factory=list)
    revision_id: str = ""  # the revision that served the request ("" = the base model)

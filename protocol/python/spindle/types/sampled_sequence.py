"""Tinker's SampledSequence (plus `text`, the completion the daemon decoded)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional

import numpy as np

from .stop_reason import StopReason

__all__ = ["SampledSequence"]


@dataclass
class SampledSequence:
    """tokens: the completion's ids (a stop token included); logprobs: raw log p of each
    (before temperature/top-k/top-p); stop_reason: "stop" | "length"; text: the decoded
    completion (a stop string or token excluded)."""
    stop_reason: StopReason = "length"
    tokens: List[int] = field(default_factory=list)
    logprobs: Optional[List[float]] = None
    text: str = ""

    @property
    def tokens_np(self) -> np.ndarray:
        return np.asarray(self.tokens, dtype=np.int32)

    @property
    def logprobs_np(self) -> Optional[np.ndarray]:
        return None if self.logprobs is None else np.asarray(self.logprobs, dtype=np.float32)

"""Tinker's TopkPromptLogprobs: the top-k prompt logprobs as two dense [n, k] matrices."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["TopkPromptLogprobs", "MASK_LOGPROB"]

MASK_LOGPROB = -99999.0  # Tinker's filler for empty entries (with token id 0)


@dataclass(frozen=True)
class TopkPromptLogprobs:
    token_ids: np.ndarray  # int32 [n, k]
    logprobs: np.ndarray   # float32 [n, k]

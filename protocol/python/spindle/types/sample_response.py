"""Tinker's SampleResponse (plus revision_id: what served the request)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional, Tuple

import numpy as np

from .sampled_sequence import SampledSequence
from .topk_prompt_logprobs import MASK_LOGPROB, TopkPromptLogprobs

__all__ = ["SampleResponse"]

TopkEntry = Optional[List[Tuple[int, float]]]


@dataclass
class SampleResponse:
    """sequences: the samples. prompt_logprobs (asked with include_prompt_logprobs): log p of
    each prompt token given the ones before it, entry 0 None; topk_prompt_logprobs (asked with
    topk_prompt_logprobs=k): per prompt position the k most likely tokens as (id, logprob),
    most likely first, entry 0 None. Both are None when not asked for. revision_id: the revision
    that served the request ("" = the bare base)."""
    sequences: List[SampledSequence] = field(default_factory=list)
    prompt_logprobs: Optional[List[Optional[float]]] = None
    topk_prompt_logprobs: Optional[List[TopkEntry]] = None
    prompt_cache_hit_tokens: int = 0
    revision_id: str = ""

    @property
    def prompt_logprobs_np(self) -> Optional[np.ndarray]:
        """float32 [n] with NaN where prompt_logprobs is None (as Tinker's field)."""
        if self.prompt_logprobs is None:
            return None
        return np.array([np.nan if x is None else x for x in self.prompt_logprobs], dtype=np.float32)

    @property
    def topk_prompt_logprobs_np(self) -> Optional[TopkPromptLogprobs]:
        """Dense [n, k] matrices, empty entries as id 0 / MASK_LOGPROB (as Tinker's field)."""
        if self.topk_prompt_logprobs is None:
            return None
        n = len(self.topk_prompt_logprobs)
        k = max((len(e) for e in self.topk_prompt_logprobs if e), default=0)
        ids = np.zeros((n, k), dtype=np.int32)
        lps = np.full((n, k), MASK_LOGPROB, dtype=np.float32)
        for i, entry in enumerate(self.topk_prompt_logprobs):
            for j, (tok, lp) in enumerate(entry or []):
                ids[i, j], lps[i, j] = tok, lp
        return TopkPromptLogprobs(token_ids=ids, logprobs=lps)

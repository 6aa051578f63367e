"""Tinker's SamplingParams."""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence, Union

__all__ = ["SamplingParams"]


@dataclass
class SamplingParams:
    """max_tokens None = until a stop token or string, the context's end or the daemon's
    max_sample_tokens (sent as 0); top_k -1 (or 0, None) = off; top_p 1 = off; seed None = a
    fresh random seed per request (the SDK draws it, so the request stays reproducible from the
    daemon's log); stop: a string, or a list of strings and/or token ids. A stop token is kept
    in the returned tokens; a stop string is cut from the text."""
    max_tokens: Optional[int] = None
    seed: Optional[int] = None
    stop: Union[str, Sequence[Union[str, int]], None] = None
    temperature: float = 1.0
    top_k: Optional[int] = -1
    top_p: float = 1.0

    def stop_token_ids(self) -> List[int]:
        if self.stop is None or isinstance(self.stop, str):
            return []
        return [int(s) for s in self.stop if not isinstance(s, str)]

    def stop_strings(self) -> List[str]:
        if self.stop is None:
            return []
        if isinstance(self.stop, str):
            return [self.stop]
        return [s for s in self.stop if isinstance(s, str)]

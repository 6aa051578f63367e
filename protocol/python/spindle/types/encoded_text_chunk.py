"""Tinker's EncodedTextChunk: a run of token ids inside a ModelInput."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Sequence

__all__ = ["EncodedTextChunk"]


@dataclass
class EncodedTextChunk:
    tokens: Sequence[int]
    type: Literal["encoded_text"] = "encoded_text"

    def __post_init__(self) -> None:
        self.tokens = [int(t) for t in self.tokens]

    @property
    def length(self) -> int:
        return len(self.tokens)

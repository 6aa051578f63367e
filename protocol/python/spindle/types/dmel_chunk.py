"""Tinker's DmelChunk (audio tokens; refused when sent, as ImageChunk). `length` needs
`expected_tokens` here: Spindle does not parse the DMel tensor container."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Literal, Optional

__all__ = ["DmelChunk"]


@dataclass
class DmelChunk:
    dmel: bytes
    expected_tokens: Optional[int] = None
    type: Literal["dmel"] = "dmel"

    def __post_init__(self) -> None:
        if isinstance(self.dmel, str):
            self.dmel = base64.b64decode(self.dmel)

    @property
    def length(self) -> int:
        if self.expected_tokens is None:
            raise ValueError("DmelChunk: Spindle cannot compute its length (no audio bases)")
        return self.expected_tokens

"""Tinker's image chunks. No base Spindle serves reads images: a ModelInput holding one is
refused with SpindleError("invalid_argument") (a BadRequestError) naming the chunk when sent."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Literal, Optional, Union

__all__ = ["ImageChunk"]


@dataclass
class ImageChunk:
    data: bytes
    format: Literal["png", "jpeg"]
    expected_tokens: Optional[int] = None
    type: Literal["image"] = "image"

    def __post_init__(self) -> None:
        if isinstance(self.data, str):  # Tinker accepts base64 text
            self.data = base64.b64decode(self.data)

    @property
    def length(self) -> int:
        if self.expected_tokens is None:
            raise ValueError("ImageChunk expected_tokens needs to be set in order to compute the length")
        return self.expected_tokens


ImageData = Union[bytes, str]

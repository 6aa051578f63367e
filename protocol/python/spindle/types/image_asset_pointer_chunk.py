"""Tinker's ImageAssetPointerChunk (refused when sent, as ImageChunk)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

__all__ = ["ImageAssetPointerChunk"]


@dataclass
class ImageAssetPointerChunk:
    format: Literal["png", "jpeg"]
    location: str
    expected_tokens: Optional[int] = None
    type: Literal["image_asset_pointer"] = "image_asset_pointer"

    @property
    def length(self) -> int:
        if self.expected_tokens is None:
            raise ValueError("ImageAssetPointerChunk expected_tokens needs to be set in order to "
                             "compute the length")
        return self.expected_tokens

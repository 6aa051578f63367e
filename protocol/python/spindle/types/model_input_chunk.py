"""Tinker's ModelInputChunk: one of the chunk types a ModelInput is made of."""

from __future__ import annotations

from typing import Union

from .dmel_chunk import DmelChunk
from .encoded_text_chunk import EncodedTextChunk
from .image_asset_pointer_chunk import ImageAssetPointerChunk
from .image_chunk import ImageChunk

ModelInputChunk = Union[EncodedTextChunk, ImageAssetPointerChunk, ImageChunk, DmelChunk]

__all__ = ["ModelInputChunk"]

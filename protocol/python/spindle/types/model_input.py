"""Tinker's ModelInput: the sequence a model reads, as a list of chunks."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Sequence

from .encoded_text_chunk import EncodedTextChunk
from .model_input_chunk import ModelInputChunk

__all__ = ["ModelInput"]


@dataclass
class ModelInput:
    """chunks: EncodedTextChunk runs of token ids (image and audio chunks can be built but are
    refused by the daemon). Methods return new ModelInputs; none mutates."""
    chunks: List[ModelInputChunk] = field(default_factory=list)

    @classmethod
    def from_ints(cls, tokens: Sequence[int]) -> "ModelInput":
        return cls(chunks=[EncodedTextChunk(tokens=list(tokens))])

    @classmethod
    def empty(cls) -> "ModelInput":
        return cls(chunks=[])

    def to_ints(self) -> List[int]:
        """All token ids; ValueError if a chunk is not an EncodedTextChunk (as Tinker)."""
        if not all(isinstance(c, EncodedTextChunk) for c in self.chunks):
            raise ValueError("to_ints only supported for ModelInput with EncodedTextChunks, got "
                             f"{[type(c).__name__ for c in self.chunks]}")
        return [t for c in self.chunks for t in c.tokens]  # type: ignore[union-attr]

    @property
    def length(self) -> int:
        return sum(c.length for c in self.chunks)

    def append(self, chunk: "ModelInputChunk | ModelInput") -> "ModelInput":
        """A new ModelInput with `chunk` added (another ModelInput: its chunks, a Spindle
        extension kept from the earlier SDK)."""
        if isinstance(chunk, ModelInput):
            return ModelInput(chunks=list(self.chunks) + list(chunk.chunks))
        return ModelInput(chunks=list(self.chunks) + [chunk])

    def append_int(self, token: int) -> "ModelInput":
        return self.append(EncodedTextChunk(tokens=[int(token)]))

    @property
    def tokens(self) -> List[int]:
        """to_ints() (Spindle's earlier SDK field, read-only now)."""
        return self.to_ints()

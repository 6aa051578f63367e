"""Token sequences and tensors, as in Tinker (ModelInput, TensorData)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

_NUMPY = {"int32": np.int32, "int64": np.int64, "float32": np.float32, "float64": np.float64,
          "uint8": np.uint8}


@dataclass
class TensorData:
    """A flat list of values with a dtype and shape (None = 1-D). Only int32/int64 (token ids)
    and float32 travel on the wire; int64 is narrowed to int32 when sent."""
    data: Any
    dtype: str = "float32"
    shape: list[int] | None = None

    def __post_init__(self) -> None:
        if self.dtype not in _NUMPY:
            raise ValueError(f"TensorData dtype {self.dtype!r}: expected one of {sorted(_NUMPY)}")

    @classmethod
    def from_numpy(cls, array: np.ndarray) -> "TensorData":
        array = np.asarray(array)
        if array.dtype.kind in "iu":
            dtype = "int64" if array.dtype.itemsize == 8 else "int32"
        elif array.dtype.kind == "f":
            dtype = "float32"
        else:
            raise ValueError(f"TensorData.from_numpy: unsupported dtype {array.dtype}")
        return cls(data=array.astype(_NUMPY[dtype]).ravel(), dtype=dtype, shape=list(array.shape))

    def to_numpy(self) -> np.ndarray:
        array = np.array(self.data, dtype=_NUMPY[self.dtype])
        return array.reshape(self.shape) if self.shape is not None else array

    def tolist(self) -> list:
        return self.to_numpy().tolist()

    def __len__(self) -> int:
        return int(np.prod(self.shape)) if self.shape is not None else len(self.data)


@dataclass
class ModelInput:
    """The tokens a model reads. Tinker builds these from chunks; Spindle carries token ids."""
    tokens: list[int] = field(default_factory=list)

    @classmethod
    def from_ints(cls, tokens: Sequence[int]) -> "ModelInput":
        return cls(tokens=[int(t) for t in tokens])

    @classmethod
    def empty(cls) -> "ModelInput":
        return cls(tokens=[])

    def to_ints(self) -> list[int]:
        return list(self.tokens)

    def append_int(self, token: int) -> "ModelInput":
        return ModelInput(tokens=self.tokens + [int(token)])

    def append(self, other: "ModelInput") -> "ModelInput":
        return ModelInput(tokens=self.tokens + other.tokens)

    @property
    def length(self) -> int:
        return len(self.tokens)

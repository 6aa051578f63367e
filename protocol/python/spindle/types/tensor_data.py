"""Tinker's TensorData: a dense (or CSR-sparse) tensor with a dtype and shape, backed by numpy.

Tinker's dtypes are "int64" and "float32"; "int32" and "float64" are accepted too (Spindle's
earlier SDK used them) and keep their width in numpy. On the wire token ids travel as int32
and everything else as float32 (messages.h DatumMsg), whatever the TensorData holds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
import sys
from typing import TYPE_CHECKING, Any, List, Optional

import numpy as np

if TYPE_CHECKING:
    import torch

__all__ = ["TensorData"]

_NUMPY = {"int64": np.int64, "float32": np.float32, "int32": np.int32, "float64": np.float64}


def _torch(what: str):
    """torch, imported on first use: `import spindle` stays light, and a value can only be a
    torch.Tensor once the caller has imported torch (see loaded_torch)."""
    try:
        import torch
    except ImportError:
        raise ImportError(f"PyTorch is not installed: TensorData.{what} needs it") from None
    return torch


def loaded_torch():
    """The torch module if the program has imported it, else None (no import here)."""
    return sys.modules.get("torch")


@dataclass(frozen=True, eq=False, init=False)
class TensorData:
    """TensorData(data, dtype, shape=None, sparse_crow_indices=None, sparse_col_indices=None).

    data: a list or numpy array; dtype None infers it (float32 for floats, int64 for ints);
    shape None = 1-D. With sparse_crow_indices/sparse_col_indices (CSR), data holds the non-zero
    values and shape the dense shape. `data` reads back the flat values as a list."""
    dtype: str
    shape: Optional[List[int]] = None
    sparse_crow_indices: Optional[List[int]] = None
    sparse_col_indices: Optional[List[int]] = None
    _numpy: np.ndarray = field(default=None, repr=False)  # type: ignore[assignment]

    def __init__(self, data: Any = None, dtype: Optional[str] = None,
                 shape: Optional[List[int]] = None,
                 sparse_crow_indices: Optional[List[int]] = None,
                 sparse_col_indices: Optional[List[int]] = None) -> None:
        if dtype is None:
            probe = np.asarray(data if data is not None else [], dtype=None)
            dtype = "float32" if probe.dtype.kind == "f" else "int64"
        if dtype not in _NUMPY:
            raise ValueError(f"TensorData dtype {dtype!r}: expected 'int64' or 'float32'")
        np_dtype = _NUMPY[dtype]
        if isinstance(data, np.ndarray):
            arr = data.astype(np_dtype) if data.dtype != np_dtype or not data.flags.writeable else data
        elif data is None:
            arr = np.empty(0, dtype=np_dtype)
        else:
            arr = np.asarray(data, dtype=np_dtype)
        if shape is not None:
            shape = [int(n) for n in shape]
            if sparse_crow_indices is None and list(arr.shape) != shape:
                arr = arr.reshape(shape)
        object.__setattr__(self, "dtype", dtype)
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "sparse_crow_indices", sparse_crow_indices)
        object.__setattr__(self, "sparse_col_indices", sparse_col_indices)
        object.__setattr__(self, "_numpy", arr)

    @property
    def data(self) -> list:
        """The flat values (the non-zeros of a sparse tensor) as a list."""
        return self._numpy.ravel().tolist()

    @classmethod
    def from_numpy(cls, array: np.ndarray) -> "TensorData":
        array = np.asarray(array)
        if array.dtype.kind == "f":
            dtype = "float32"
        elif array.dtype.kind in "iub":
            dtype = "int64"
        else:
            raise ValueError(f"TensorData.from_numpy: unsupported dtype {array.dtype}")
        return cls(data=array, dtype=dtype, shape=list(array.shape))

    @classmethod
    def from_torch(cls, tensor: "torch.Tensor") -> "TensorData":
        torch = _torch("from_torch")
        tensor = tensor.detach().cpu()
        if tensor.dtype == torch.bfloat16 or tensor.dtype == torch.float16:
            tensor = tensor.float()
        return cls.from_numpy(tensor.contiguous().numpy())

    @classmethod
    def from_torch_sparse(cls, tensor: "torch.Tensor") -> "TensorData":
        """A CSR TensorData of a 2-D tensor when that is smaller, else dense (as Tinker)."""
        _torch("from_torch_sparse")
        if tensor.ndim != 2:
            return cls.from_torch(tensor)
        nnz = int(tensor.count_nonzero().item())
        if (tensor.shape[0] + 1) + 2 * nnz >= tensor.shape[0] * tensor.shape[1]:
            return cls.from_torch(tensor)
        dense = cls.from_torch(tensor)
        array = dense.to_numpy()
        rows, cols = np.nonzero(array)  # row-major: CSR order
        crow = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=array.shape[0]))])
        return cls(data=array[rows, cols], dtype=dense.dtype, shape=list(array.shape),
                   sparse_crow_indices=[int(x) for x in crow],
                   sparse_col_indices=[int(x) for x in cols])

    def to_numpy(self) -> np.ndarray:
        if self.sparse_crow_indices is None:
            return self._numpy
        if self.sparse_col_indices is None or self.shape is None or len(self.shape) != 2:
            raise ValueError("sparse TensorData needs sparse_col_indices and a 2-D shape")
        dense = np.zeros(self.shape, dtype=self._numpy.dtype)
        values = self._numpy.ravel()
        crow = self.sparse_crow_indices
        for row in range(self.shape[0]):
            for k in range(crow[row], crow[row + 1]):
                dense[row, self.sparse_col_indices[k]] = values[k]
        return dense

    def to_torch(self) -> "torch.Tensor":
        torch = _torch("to_torch")
        return torch.from_numpy(np.array(self.to_numpy(), copy=True))

    def tolist(self) -> list:
        return self.to_numpy().tolist()

    def __len__(self) -> int:
        """Element count of the dense tensor (Spindle's earlier SDK; Tinker has no len)."""
        if self.shape is not None:
            return int(np.prod(self.shape))
        return int(self._numpy.size)

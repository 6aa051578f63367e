"""Tinker's Datum: one training example (the tokens read and the per-token loss inputs)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict

import numpy as np

from .model_input import ModelInput
from .tensor_data import TensorData, loaded_torch

__all__ = ["Datum"]

# Loss input name -> TensorData dtype for lists (Tinker's _KEY_TO_TYPE).
_KEY_TO_TYPE = {"target_tokens": "int64", "weights": "float32", "advantages": "float32",
                "logprobs": "float32", "clip_low_threshold": "float32",
                "clip_high_threshold": "float32"}
_SPARSE_ELIGIBLE_KEYS = {"target_tokens", "weights"}


@dataclass
class Datum:
    """model_input: what the model reads; loss_fn_inputs by name, each as long as model_input:
    "target_tokens" (required), "weights", "logprobs", "advantages". Values may be TensorData,
    torch tensors, numpy arrays or lists; they are converted to TensorData."""
    model_input: ModelInput
    loss_fn_inputs: Dict[str, TensorData] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.loss_fn_inputs = {k: _convert(k, v) for k, v in self.loss_fn_inputs.items()}


def _convert(key: str, value: Any) -> TensorData:
    if isinstance(value, TensorData):
        return value
    torch = loaded_torch()
    if torch is not None and isinstance(value, torch.Tensor):
        if key in _SPARSE_ELIGIBLE_KEYS and value.ndim == 2:
            return TensorData.from_torch_sparse(value)
        return TensorData.from_torch(value)
    if isinstance(value, np.ndarray):
        return TensorData.from_numpy(value)
    if isinstance(value, (list, tuple)):
        array = np.asarray(value)
        if array.dtype == object:
            raise ValueError(f"{key} must be a rectangular numeric array; ragged nested lists are "
                             "not supported")
        if array.size == 0 or array.dtype.kind in "fiub":
            dtype = _KEY_TO_TYPE.get(key, "float32" if array.dtype.kind == "f" else "int64")
            return TensorData(data=array, dtype=dtype, shape=list(array.shape))
    raise TypeError(f"Unsupported loss_fn_inputs value for {key!r}: {type(value).__name__}")

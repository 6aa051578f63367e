"""Tinker's ForwardBackwardOutput."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List

from .tensor_data import TensorData

__all__ = ["ForwardBackwardOutput"]


@dataclass
class ForwardBackwardOutput:
    """loss_fn_outputs[i] = {"logprobs": TensorData float32 [n]} for datum i (log p of each
    target token); metrics: "loss:sum", "n_tokens:sum", "clip_fraction:mean" (plus a custom
    loss's own metrics for forward_backward_custom)."""
    loss_fn_output_type: str = "ArrayRecord"
    loss_fn_outputs: List[Dict[str, TensorData]] = field(default_factory=list)
    metrics: Dict[str, float] = field(default_factory=dict)

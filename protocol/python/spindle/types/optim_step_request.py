"""Tinker's AdamParams (AdamW; defaults as Tinker's) and OptimStepRequest."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Optional

__all__ = ["AdamParams", "OptimStepRequest"]


@dataclass
class AdamParams:
    learning_rate: float = 1e-4
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-12
    weight_decay: float = 0.0  # decoupled (AdamW)
    grad_clip_norm: float = 0.0  # 0 = no clipping


@dataclass
class OptimStepRequest:
    adam_params: AdamParams = field(default_factory=AdamParams)
    model_id: str = ""
    seq_id: Optional[int] = None
    type: Literal["optim_step"] = "optim_step"

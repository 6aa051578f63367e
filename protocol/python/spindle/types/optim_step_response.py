"""Tinker's OptimStepResponse (metrics), with Spindle's step, grad_norm and clipped."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional

__all__ = ["OptimStepResponse"]


@dataclass
class OptimStepResponse:
    """metrics: {"optim/step": optimizer steps so far, "optim/grad_norm": the global gradient
    norm before clipping, "optim/clipped": 1.0 when grad_clip_norm clipped it, else 0.0}; the
    same values are the attributes step, grad_norm and clipped."""
    metrics: Optional[Dict[str, float]] = None
    step: int = 0
    grad_norm: float = 0.0
    clipped: bool = False

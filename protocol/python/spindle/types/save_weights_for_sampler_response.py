"""Tinker's SaveWeightsForSamplerResponse: the same fields as SaveWeightsResponse."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from .save_weights_response import SaveWeightsResponse

__all__ = ["SaveWeightsForSamplerResponse"]


@dataclass
class SaveWeightsForSamplerResponse(SaveWeightsResponse):
    type: Optional[str] = "save_weights_for_sampler"

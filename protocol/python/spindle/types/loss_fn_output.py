from __future__ import annotations

from typing import Dict

from .tensor_data import TensorData

LossFnOutput = Dict[str, TensorData]

__all__ = ["LossFnOutput"]

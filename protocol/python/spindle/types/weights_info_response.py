from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

__all__ = ["WeightsInfoResponse"]


@dataclass
class WeightsInfoResponse:
    base_model: str
    is_lora: bool = True
    lora_rank: Optional[int] = None
    train_unembed: Optional[bool] = None
    train_mlp: Optional[bool] = None
    train_attn: Optional[bool] = None

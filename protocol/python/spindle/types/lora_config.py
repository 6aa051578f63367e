from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

__all__ = ["LoraConfig"]


@dataclass
class LoraConfig:
    rank: int
    seed: Optional[int] = None
    train_unembed: bool = True
    train_mlp: bool = True
    train_attn: bool = True

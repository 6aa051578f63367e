"""Tinker's GetInfoResponse and ModelData (TrainingClient.get_info)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

__all__ = ["GetInfoResponse", "ModelData"]


@dataclass
class ModelData:
    arch: Optional[str] = None        # the base's architecture ("llama", "qwen3", ...)
    model_name: Optional[str] = None  # the base model id
    tokenizer_id: Optional[str] = None  # the base model id (its tokenizer is the daemon's)


@dataclass
class GetInfoResponse:
    """model_id: the policy address (Spindle's training run id)."""
    model_data: ModelData = field(default_factory=ModelData)
    model_id: str = ""
    is_lora: Optional[bool] = True
    lora_rank: Optional[int] = None
    model_name: Optional[str] = None
    type: Optional[str] = "get_info"

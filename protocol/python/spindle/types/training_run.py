"""Tinker's TrainingRun: a Spindle policy (its line of revisions)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Dict, Optional

from .checkpoint import Checkpoint

__all__ = ["TrainingRun"]


@dataclass
class TrainingRun:
    """training_run_id: the policy address; model_owner: its tenant; last_request_time: the
    policy's last update; user_metadata: what the creating client sent."""
    training_run_id: str
    base_model: str
    model_owner: str
    is_lora: bool
    last_request_time: datetime
    corrupted: bool = False
    lora_rank: Optional[int] = None
    last_checkpoint: Optional[Checkpoint] = None
    last_sampler_checkpoint: Optional[Checkpoint] = None
    user_metadata: Optional[Dict[str, str]] = None

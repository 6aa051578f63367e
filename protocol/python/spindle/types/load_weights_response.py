"""Tinker's LoadWeightsResponse (load_state), with the session as the daemon reports it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ._training import TrainingSessionInfo

__all__ = ["LoadWeightsResponse"]


@dataclass
class LoadWeightsResponse(TrainingSessionInfo):
    """path: the revision loaded; model_id: the training client's policy address; the
    TrainingSessionInfo fields (session_id, step, ...) after the load."""
    path: Optional[str] = None
    model_id: Optional[str] = None
    type: Optional[str] = "load_weights"

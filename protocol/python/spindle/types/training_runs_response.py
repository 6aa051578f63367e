from __future__ import annotations

from dataclasses import dataclass, field
from typing import List

from .cursor import Cursor
from .training_run import TrainingRun

__all__ = ["TrainingRunsResponse"]


@dataclass
class TrainingRunsResponse:
    training_runs: List[TrainingRun] = field(default_factory=list)
    cursor: Cursor = field(default_factory=Cursor)

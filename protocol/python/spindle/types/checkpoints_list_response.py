from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional

from .checkpoint import Checkpoint
from .cursor import Cursor

__all__ = ["CheckpointsListResponse"]


@dataclass
class CheckpointsListResponse:
    checkpoints: List[Checkpoint] = field(default_factory=list)
    cursor: Optional[Cursor] = None

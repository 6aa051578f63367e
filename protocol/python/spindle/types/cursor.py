from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Cursor"]


@dataclass
class Cursor:
    offset: int = 0
    limit: int = 0
    total_count: int = 0

from __future__ import annotations

from typing import Literal

StopReason = Literal["length", "stop"]

__all__ = ["StopReason"]

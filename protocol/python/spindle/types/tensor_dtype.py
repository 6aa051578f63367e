"""Tinker's TensorDtype: the element types a TensorData declares."""

from __future__ import annotations

from typing import Literal

TensorDtype = Literal["int64", "float32"]

__all__ = ["TensorDtype"]

"""Tinker's LossFnType: the built-in losses (all served by spindled)."""

from __future__ import annotations

from typing import Literal

LossFnType = Literal["cross_entropy", "importance_sampling", "ppo", "cispo", "dro"]

__all__ = ["LossFnType"]

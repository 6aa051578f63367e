from __future__ import annotations

ModelID = str  # Spindle: a policy address, spindle://tenant/policy

__all__ = ["ModelID"]

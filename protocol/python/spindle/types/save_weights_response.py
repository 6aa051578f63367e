"""Tinker's SaveWeightsResponse (save_state), with Spindle's revision fields."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Optional

__all__ = ["SaveWeightsResponse"]


@dataclass
class SaveWeightsResponse:
    """path: the revision's address, spindle://tenant/policy@revision (what load_state,
    create_sampling_client and the catalog take). expires_ms: Unix ms when an ephemeral
    revision (saved with ttl_seconds) expires; 0 = durable."""
    path: str
    revision_id: str = ""
    bytes: int = 0
    expires_ms: int = 0
    type: Optional[str] = "save_weights"

    @property
    def expires_at(self) -> Optional[datetime]:
        if not self.expires_ms:
            return None
        return datetime.fromtimestamp(self.expires_ms / 1000.0, tz=timezone.utc)

"""Tinker's Checkpoint: one catalog revision, as the RestClient lists it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal, Optional

__all__ = ["Checkpoint", "CheckpointType", "ParsedCheckpointTinkerPath"]

CheckpointType = Literal["training", "sampler"]


@dataclass
class Checkpoint:
    """checkpoint_type: "training" for a revision saved with save_state (weights and optimizer
    state), "sampler" for save_weights_for_sampler. checkpoint_id: the revision id;
    tinker_path: its address (spindle://tenant/policy@revision). expires_at: when an ephemeral
    revision expires (None = durable); expired: it did and was collected (the row stays for
    lineage; addressing it is NotFoundError)."""
    checkpoint_id: str
    checkpoint_type: CheckpointType
    time: datetime
    tinker_path: str
    size_bytes: Optional[int] = None
    public: bool = False
    expires_at: Optional[datetime] = None
    training_run_id: str = ""
    step: int = 0
    name: str = ""
    expired: bool = False


@dataclass
class ParsedCheckpointTinkerPath:
    """A revision address split up: training_run_id is the policy address."""
    tinker_path: str
    training_run_id: str
    checkpoint_type: CheckpointType
    checkpoint_id: str

    @classmethod
    def from_tinker_path(cls, tinker_path: str) -> "ParsedCheckpointTinkerPath":
        """spindle://tenant/policy@revision -> (policy address, revision id). checkpoint_type
        is "sampler": the address alone does not say whether optimizer state was saved."""
        if not tinker_path.startswith("spindle://") or "@" not in tinker_path:
            raise ValueError(f"Invalid checkpoint path {tinker_path!r}: expected "
                             "spindle://tenant/policy@revision")
        policy, revision = tinker_path.rsplit("@", 1)
        return cls(tinker_path=tinker_path, training_run_id=policy, checkpoint_type="sampler",
                   checkpoint_id=revision)

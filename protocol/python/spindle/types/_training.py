"""Spindle's training session record, and what the wire carries for each loss input."""

from __future__ import annotations

from dataclasses import dataclass

# Loss input name -> wire dtype (messages.h DatumMsg).
LOSS_INPUT_DTYPES = {"target_tokens": "int32", "weights": "float32", "logprobs": "float32",
                     "advantages": "float32"}


@dataclass
class TrainingSessionInfo:
    """A training session as the daemon reports it (create, create_from_state, load_state).
    lease_ms: the session closes after this long without a request or heartbeat naming it
    (the SDK heartbeats while the TrainingClient lives); revision_id: the revision its weights
    came from ("" = a fresh LoRA); user_metadata_json: the policy's; data_parallel: the workers
    of a coordinator it trains on (1 = one)."""
    session_id: str = ""
    policy_address: str = ""
    base_model: str = ""
    rank: int = 0
    alpha: float = 0.0
    step: int = 0
    lease_ms: int = 0
    user_metadata_json: str = ""
    revision_id: str = ""
    data_parallel: int = 1

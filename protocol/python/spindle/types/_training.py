"""Training types (Tinker's Datum, AdamParams, ForwardBackwardOutput, ...)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

import numpy as np

from ._tensor import ModelInput, TensorData

LossInput = Union[TensorData, np.ndarray, list]

# Loss input name -> wire dtype (messages.h DatumMsg).
LOSS_INPUT_DTYPES = {"target_tokens": "int32", "weights": "float32", "logprobs": "float32",
                     "advantages": "float32"}


@dataclass
class Datum:
    """One training example: the tokens the model reads and the per-token loss inputs
    ("target_tokens" required; "weights", "logprobs", "advantages" as the loss needs), each
    as long as model_input. Lists and arrays are converted to TensorData."""
    model_input: ModelInput
    loss_fn_inputs: dict[str, LossInput] = field(default_factory=dict)

    def __post_init__(self) -> None:
        converted: dict[str, LossInput] = {}
        for name, value in self.loss_fn_inputs.items():
            if isinstance(value, TensorData):
                converted[name] = value
                continue
            array = np.asarray(value)
            if name == "target_tokens" or (name not in LOSS_INPUT_DTYPES and array.dtype.kind in "iu"):
                converted[name] = TensorData.from_numpy(array.astype(np.int64))
            else:
                converted[name] = TensorData.from_numpy(array.astype(np.float32))
        self.loss_fn_inputs = converted


@dataclass
class AdamParams:
    learning_rate: float = 1e-4
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-12
    weight_decay: float = 0.0
    grad_clip_norm: float = 0.0  # 0 = no clipping


@dataclass
class ForwardBackwardOutput:
    """loss_fn_outputs[i] = {"logprobs": TensorData} for datum i (log p of each target
    token); metrics: "loss:sum", "n_tokens:sum", "clip_fraction:mean"."""
    loss_fn_outputs: list[dict[str, TensorData]]
    metrics: dict[str, float]


@dataclass
class OptimStepResponse:
    step: int = 0
    grad_norm: float = 0.0
    clipped: bool = False


@dataclass
class SaveWeightsResponse:
    """path: the revision's address, spindle://tenant/policy@revision."""
    path: str
    revision_id: str = ""
    bytes: int = 0


SaveWeightsForSamplerResponse = SaveWeightsResponse
SaveStateResponse = SaveWeightsResponse


@dataclass
class TrainingSessionInfo:
    """A training session as the daemon reports it (create, create_from_state, load_state)."""
    session_id: str = ""
    policy_address: str = ""
    base_model: str = ""
    rank: int = 0
    alpha: float = 0.0
    step: int = 0


LoadStateResponse = TrainingSessionInfo



"""SDK types <-> wire bodies (messages.h structs). Every field of each struct is sent, with
the C++ type's JSON kind (cereal has no defaults on input and checks number kinds)."""

from __future__ import annotations

import math
import random

import numpy as np

from . import _wire
from .types import (AdamParams, BaseInfo, Datum, ForwardBackwardOutput, LimitsInfo,
                    LineageEntry, LineageResponse, ModelInput, OptimStepResponse, PlacementInfo,
                    PolicyDetails, PolicyInfo, PolicyListResponse, RevisionInfo,
                    SampledSequence, SampleResponse, SamplingParams, SaveWeightsResponse,
                    ServerCapabilities, ServerStatus, TensorData, TrainingSessionInfo)
from .types._records import from_wire
from .types._training import LOSS_INPUT_DTYPES


def random_seed() -> int:
    return random.SystemRandom().getrandbits(63)


# ---- requests --------------------------------------------------------------------------------

def _loss_input_dtype(name: str, value: TensorData) -> str:
    if name in LOSS_INPUT_DTYPES:
        return LOSS_INPUT_DTYPES[name]
    return "int32" if value.dtype.startswith("int") else "float32"


def data_body(session_id: str, data: list[Datum], loss_fn: str,
              loss_fn_config: dict[str, float] | None, frames: _wire.FrameBuilder) -> dict:
    """ForwardBackwardRequest."""
    msgs = []
    for datum in data:
        if not isinstance(datum, Datum):
            raise TypeError(f"expected spindle.types.Datum, got {type(datum).__name__}")
        inputs = []
        for name, value in datum.loss_fn_inputs.items():
            tensor = value if isinstance(value, TensorData) else TensorData.from_numpy(np.asarray(value))
            ref = frames.add(tensor.to_numpy().ravel(), _loss_input_dtype(name, tensor))
            inputs.append({"name": name, "tensor": ref})
        msgs.append({"model_input": frames.add(datum.model_input.to_ints(), "int32"),
                     "loss_fn_inputs": inputs})
    config = [{"name": str(k), "value": float(v)} for k, v in (loss_fn_config or {}).items()]
    return {"session_id": session_id, "data": msgs, "loss_fn": str(loss_fn),
            "loss_fn_config": config}


def adam_body(params: AdamParams) -> dict:
    return {"learning_rate": float(params.learning_rate), "beta1": float(params.beta1),
            "beta2": float(params.beta2), "eps": float(params.eps),
            "weight_decay": float(params.weight_decay),
            "grad_clip_norm": float(params.grad_clip_norm)}


def sampling_params_body(params: SamplingParams) -> dict:
    seed = random_seed() if params.seed is None else int(params.seed)
    top_k = 0 if params.top_k is None or params.top_k <= 0 else int(params.top_k)
    return {"max_tokens": int(params.max_tokens), "temperature": float(params.temperature),
            "top_k": top_k, "top_p": float(params.top_p), "seed": seed,
            "stop_token_ids": params.stop_token_ids(), "stop_strings": params.stop_strings()}


def prompt_ref(prompt: ModelInput | list[int], frames: _wire.FrameBuilder) -> dict:
    tokens = prompt.to_ints() if isinstance(prompt, ModelInput) else [int(t) for t in prompt]
    return frames.add(tokens, "int32")


# ---- replies ---------------------------------------------------------------------------------

def session_info(reply: _wire.Reply) -> TrainingSessionInfo:
    return from_wire(TrainingSessionInfo, reply.body)


def forward_backward_output(reply: _wire.Reply) -> ForwardBackwardOutput:
    outputs = []
    for i, named in enumerate(reply.body.get("loss_fn_outputs", [])):
        out = {}
        for item in named:
            array = _wire.read_tensor(item["tensor"], reply.frames, f"loss_fn_outputs[{i}].{item['name']}")
            out[str(item["name"])] = TensorData.from_numpy(array.copy())
        outputs.append(out)
    return ForwardBackwardOutput(loss_fn_outputs=outputs,
                                 metrics=_wire.named_values(reply.body.get("metrics", [])))


def optim_step_response(reply: _wire.Reply) -> OptimStepResponse:
    return from_wire(OptimStepResponse, reply.body)


def save_response(reply: _wire.Reply) -> SaveWeightsResponse:
    body = reply.body
    return SaveWeightsResponse(path=str(body.get("address", "")),
                               revision_id=str(body.get("revision_id", "")),
                               bytes=int(body.get("bytes", 0)))


def sample_response(reply: _wire.Reply) -> SampleResponse:
    sequences = []
    for i, seq in enumerate(reply.body.get("sequences", [])):
        tokens = _wire.read_tensor(seq["tokens"], reply.frames, f"sequences[{i}].tokens")
        logprobs = _wire.read_tensor(seq["logprobs"], reply.frames, f"sequences[{i}].logprobs")
        sequences.append(SampledSequence(tokens=[int(t) for t in tokens],
                                         logprobs=[float(x) for x in logprobs],
                                         stop_reason=str(seq.get("stop_reason", "")),
                                         text=str(seq.get("text", ""))))
    return SampleResponse(sequences=sequences, revision_id=str(reply.body.get("revision_id", "")))


def logprobs_list(reply: _wire.Reply) -> list[float | None]:
    values = _wire.read_tensor(reply.body["logprobs"], reply.frames, "logprobs")
    return [None if (i == 0 or not math.isfinite(float(x))) else float(x)
            for i, x in enumerate(values)]


def capabilities(reply: _wire.Reply) -> ServerCapabilities:
    body = reply.body
    return ServerCapabilities(bases=[from_wire(BaseInfo, b) for b in body.get("bases", [])],
                              limits=from_wire(LimitsInfo, body.get("limits", {})),
                              loss_fns=list(body.get("loss_fns", [])),
                              encodings=list(body.get("encodings", [])))


def status(reply: _wire.Reply) -> ServerStatus:
    placements = [from_wire(PlacementInfo, p) for p in reply.body.get("placements", [])]
    return from_wire(ServerStatus, reply.body, placements=placements)


def policy(obj: dict) -> PolicyInfo:
    return from_wire(PolicyInfo, obj)


def revision(obj: dict) -> RevisionInfo:
    return from_wire(RevisionInfo, obj)


def policy_details(reply: _wire.Reply) -> PolicyDetails:
    body = reply.body
    return PolicyDetails(policy=policy(body.get("policy", {})),
                         revision=revision(body.get("revision", {})),
                         recent=[revision(r) for r in body.get("recent", [])])


def policy_list(reply: _wire.Reply) -> PolicyListResponse:
    return PolicyListResponse(policies=[policy(p) for p in reply.body.get("policies", [])],
                              next_cursor=str(reply.body.get("next_cursor", "")))


def lineage(reply: _wire.Reply) -> LineageResponse:
    body = reply.body

    def entries(key: str) -> list[LineageEntry]:
        return [LineageEntry(revision=revision(e.get("revision", {})), depth=int(e.get("depth", 0)))
                for e in body.get(key, [])]

    return LineageResponse(revision=revision(body.get("revision", {})),
                           ancestors=entries("ancestors"), descendants=entries("descendants"),
                           ancestors_truncated=bool(body.get("ancestors_truncated", False)),
                           descendants_truncated=bool(body.get("descendants_truncated", False)))

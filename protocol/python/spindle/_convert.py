"""SDK types <-> wire bodies (messages.h structs). Every field of each struct is sent, with
the C++ type's JSON kind (cereal has no defaults on input and checks number kinds)."""

from __future__ import annotations

import json
import math
import random

import numpy as np

from . import _wire
from .errors import BAD_REPLY, INVALID_ARGUMENT, SpindleError
from .types import (AdamParams, BaseInfo, BaseStatus, Datum, EncodedTextChunk,
                    ForwardBackwardOutput, LimitsInfo, LineageEntry, LineageResponse, ModelInput,
                    OptimStepResponse, PlacementInfo, PolicyDetails, PolicyInfo,
                    PolicyListResponse, RevisionInfo, SampledSequence, SampleResponse,
                    SamplingParams, SaveWeightsResponse, ServerCapabilities, ServerStatus,
                    TensorData, TrainingSessionInfo)
from .types._records import from_wire
from .types._training import LOSS_INPUT_DTYPES

# Class versions of the request structs that grew fields (messages.h CEREAL_CLASS_VERSION);
# _wire's encoder defaults every object to version 1, so these are set in the body.
CREATE_TRAINING_V = 3
CREATE_FROM_STATE_V = 3
SAVE_V = 2
LOAD_STATE_V = 2
SAMPLE_V = 2
_VERSION = "cereal_class_version"

# OptimStepResponse.metrics keys are "optim/step", "optim/grad_norm", "optim/clipped": a plain
# "step" would overwrite the step a cookbook loop logs its metrics under.
OPTIM_METRIC_PREFIX = "optim/"


def random_seed() -> int:
    return random.SystemRandom().getrandbits(63)


# ---- requests --------------------------------------------------------------------------------

def _loss_input_dtype(name: str, value: TensorData) -> str:
    if name in LOSS_INPUT_DTYPES:
        return LOSS_INPUT_DTYPES[name]
    return "int32" if value.dtype.startswith("int") else "float32"


def tokens_of(model_input: ModelInput | list[int], where: str) -> list[int]:
    """The token ids of a ModelInput; a chunk that is not text (ImageChunk, ...) is refused with
    SpindleError("invalid_argument") naming it: no base served by Spindle reads images."""
    if not isinstance(model_input, ModelInput):
        return [int(t) for t in model_input]
    for i, chunk in enumerate(model_input.chunks):
        if not isinstance(chunk, EncodedTextChunk):
            raise SpindleError(INVALID_ARGUMENT,
                               f"{where}.chunks[{i}] is a {type(chunk).__name__}: Spindle's bases "
                               "read token ids only (EncodedTextChunk); images and audio are not "
                               "supported")
    return model_input.to_ints()


def data_body(session_id: str, data: list[Datum], loss_fn: str,
              loss_fn_config: dict[str, float] | None, frames: _wire.FrameBuilder) -> dict:
    """ForwardBackwardRequest."""
    msgs = []
    for index, datum in enumerate(data):
        if not isinstance(datum, Datum):
            raise TypeError(f"expected spindle.types.Datum, got {type(datum).__name__}")
        inputs = []
        for name, value in datum.loss_fn_inputs.items():
            tensor = value if isinstance(value, TensorData) else TensorData.from_numpy(np.asarray(value))
            ref = frames.add(tensor.to_numpy().ravel(), _loss_input_dtype(name, tensor))
            inputs.append({"name": name, "tensor": ref})
        tokens = tokens_of(datum.model_input, f"data[{index}].model_input")
        msgs.append({"model_input": frames.add(tokens, "int32"),
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
    """SamplingParamsMsg. max_tokens None -> 0 (until a stop, the context end or the daemon's
    max_sample_tokens); top_k <= 0 or None -> 0 (off)."""
    seed = random_seed() if params.seed is None else int(params.seed)
    top_k = 0 if params.top_k is None or params.top_k <= 0 else int(params.top_k)
    max_tokens = 0 if params.max_tokens is None else int(params.max_tokens)
    return {"max_tokens": max_tokens, "temperature": float(params.temperature),
            "top_k": top_k, "top_p": float(params.top_p), "seed": seed,
            "stop_token_ids": params.stop_token_ids(), "stop_strings": params.stop_strings()}


def prompt_ref(prompt: ModelInput | list[int], frames: _wire.FrameBuilder) -> dict:
    return frames.add(tokens_of(prompt, "prompt"), "int32")


def versioned(body: dict, version: int) -> dict:
    """`body` marked as the given class version of its struct."""
    body[_VERSION] = int(version)
    return body


def user_metadata_json(*layers: dict | None) -> str:
    """Tinker's user_metadata (dicts of str, later layers win) as the wire's JSON text."""
    merged: dict[str, str] = {}
    for layer in layers:
        for k, v in (layer or {}).items():
            merged[str(k)] = str(v)
    return json.dumps(merged, sort_keys=True) if merged else ""


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
    step = int(reply.body.get("step", 0))
    grad_norm = float(reply.body.get("grad_norm", 0.0))
    clipped = bool(reply.body.get("clipped", False))
    return OptimStepResponse(metrics={OPTIM_METRIC_PREFIX + "step": float(step),
                                      OPTIM_METRIC_PREFIX + "grad_norm": grad_norm,
                                      OPTIM_METRIC_PREFIX + "clipped": 1.0 if clipped else 0.0},
                             step=step, grad_norm=grad_norm, clipped=clipped)


def save_response(cls: type = SaveWeightsResponse):
    def convert(reply: _wire.Reply) -> SaveWeightsResponse:
        body = reply.body
        return cls(path=str(body.get("address", "")), revision_id=str(body.get("revision_id", "")),
                   bytes=int(body.get("bytes", 0)), expires_ms=int(body.get("expires_ms", 0)))
    return convert


def sample_response(reply: _wire.Reply) -> SampleResponse:
    sequences = []
    for i, seq in enumerate(reply.body.get("sequences", [])):
        tokens = _wire.read_tensor(seq["tokens"], reply.frames, f"sequences[{i}].tokens")
        logprobs = _wire.read_tensor(seq["logprobs"], reply.frames, f"sequences[{i}].logprobs")
        sequences.append(SampledSequence(tokens=[int(t) for t in tokens],
                                         logprobs=[float(x) for x in logprobs],
                                         stop_reason=str(seq.get("stop_reason", "")),  # type: ignore[arg-type]
                                         text=str(seq.get("text", ""))))
    prompt_lp, topk = _prompt_logprobs(reply)
    return SampleResponse(sequences=sequences, prompt_logprobs=prompt_lp, topk_prompt_logprobs=topk,
                          revision_id=str(reply.body.get("revision_id", "")))


def _prompt_logprobs(reply: _wire.Reply):
    """SampleReply v2's prompt frames -> Tinker's lists (None when not asked: shape [0])."""
    body = reply.body
    prompt_lp = None
    if body.get("prompt_logprobs"):
        values = _wire.read_tensor(body["prompt_logprobs"], reply.frames, "prompt_logprobs")
        if values.size:
            prompt_lp = [None if (i == 0 or not math.isfinite(float(x))) else float(x)
                         for i, x in enumerate(values)]
    topk = None
    if body.get("topk_prompt_ids") and body.get("topk_prompt_logprobs"):
        ids = _wire.read_tensor(body["topk_prompt_ids"], reply.frames, "topk_prompt_ids")
        lps = _wire.read_tensor(body["topk_prompt_logprobs"], reply.frames, "topk_prompt_logprobs")
        if ids.shape != lps.shape or ids.ndim != 2:
            raise SpindleError(BAD_REPLY, f"topk_prompt_ids {list(ids.shape)} and "
                               f"topk_prompt_logprobs {list(lps.shape)} differ", reply.op)
        if ids.size:
            topk = []
            for i in range(ids.shape[0]):
                row = [(int(t), float(lp)) for t, lp in zip(ids[i], lps[i])
                       if t >= 0 and math.isfinite(float(lp))]
                topk.append(row if (i > 0 and row) else None)
    return prompt_lp, topk


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
    bases = [from_wire(BaseStatus, b) for b in reply.body.get("bases", [])]
    return from_wire(ServerStatus, reply.body, placements=placements, bases=bases)


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

"""Spindle Python SDK: Tinker's clients and types for a spindled daemon, over ZeroMQ.

`import spindle as tinker` is meant to be the only change a Tinker script needs:

    import spindle as tinker
    from spindle import types
    service = tinker.ServiceClient()             # local daemon of the data dir (or base_url=)
    training = service.create_lora_training_client(base_model="stories260K", rank=8)
    tokenizer = training.get_tokenizer()
    training.forward_backward(data, "cross_entropy").result()
    training.optim_step(types.AdamParams(learning_rate=1e-3)).result()
    sampler = training.save_weights_and_get_sampling_client()
    sampler.sample(types.ModelInput.from_ints(tokenizer.encode("Once")), 4,
                   types.SamplingParams(max_tokens=20)).result()

The names Tinker exports at its top level (types, clients, exceptions) are exported here too;
docs/python-sdk.md lists what differs and why.
"""

from . import errors, types
from ._futures import APIFuture
from .errors import (APIConnectionError, APIError, APIResponseValidationError, APIStatusError,
                     APITimeoutError, AuthenticationError, BadRequestError, ConflictError,
                     InternalServerError, NotFoundError, PermissionDeniedError, RateLimitError,
                     RequestFailedError, SidecarDiedError, SidecarError, SidecarIPCError,
                     SidecarStartupError, SpindleError, TinkerError, UnprocessableEntityError)
from .rest_client import RestClient
from .sampling_client import SamplingClient
from .service_client import ServiceClient
from .tokenizer import Tokenizer
from .training_client import TrainingClient
from .types import (AdamParams, Checkpoint, CheckpointType, Datum, DmelChunk, EncodedTextChunk,
                    ForwardBackwardOutput, ImageChunk, LoraConfig, LossFnType, ModelID,
                    ModelInput, ModelInputChunk, OptimStepRequest, OptimStepResponse,
                    ParsedCheckpointTinkerPath, SampledSequence, SampleResponse, SamplingParams,
                    StopReason, TensorData, TensorDtype, TrainingRun)
from . import lib  # noqa: E402  (tinker.lib.public_interfaces paths)

__version__ = "0.1.0"
__title__ = "spindle"

__all__ = [
    # Clients
    "APIFuture", "RestClient", "SamplingClient", "ServiceClient", "Tokenizer", "TrainingClient",
    # Types (Tinker's top-level ones)
    "AdamParams", "Checkpoint", "CheckpointType", "Datum", "DmelChunk", "EncodedTextChunk",
    "ForwardBackwardOutput", "ImageChunk", "LoraConfig", "LossFnType", "ModelID", "ModelInput",
    "ModelInputChunk", "OptimStepRequest", "OptimStepResponse", "ParsedCheckpointTinkerPath",
    "SampleResponse", "SampledSequence", "SamplingParams", "StopReason", "TensorData",
    "TensorDtype", "TrainingRun",
    # Exceptions (Tinker's, and SpindleError beneath them)
    "APIConnectionError", "APIError", "APIResponseValidationError", "APIStatusError",
    "APITimeoutError", "AuthenticationError", "BadRequestError", "ConflictError",
    "InternalServerError", "NotFoundError", "PermissionDeniedError", "RateLimitError",
    "RequestFailedError", "SidecarDiedError", "SidecarError", "SidecarIPCError",
    "SidecarStartupError", "SpindleError", "TinkerError", "UnprocessableEntityError",
    # Modules
    "errors", "lib", "types",
]

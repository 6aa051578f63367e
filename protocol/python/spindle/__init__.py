"""Spindle Python SDK: Tinker-style clients for a spindled daemon over ZeroMQ.

    import spindle
    from spindle import types
    service = spindle.ServiceClient()            # local daemon of the data dir
    training = service.create_lora_training_client(base_model="stories260K", rank=8)
    training.forward_backward(data, "cross_entropy").result()
    training.optim_step(types.AdamParams(learning_rate=1e-3)).result()
    sampler = training.save_weights_and_get_sampling_client("step-1")
    sampler.sample(types.ModelInput.from_ints([1]), 4, types.SamplingParams(max_tokens=20)).result()
"""

from . import errors, types
from ._futures import APIFuture
from .errors import SpindleError
from .sampling_client import SamplingClient
from .service_client import ServiceClient
from .training_client import TrainingClient

__version__ = "0.1.0"

__all__ = ["APIFuture", "SamplingClient", "ServiceClient", "SpindleError", "TrainingClient",
           "errors", "types"]

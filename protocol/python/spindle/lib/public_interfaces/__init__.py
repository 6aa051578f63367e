"""Tinker's `tinker.lib.public_interfaces`: the client classes, by the module path Tinker uses."""

from ..._futures import APIFuture
from ...rest_client import RestClient
from ...sampling_client import SamplingClient
from ...service_client import ServiceClient
from ...training_client import TrainingClient

AwaitableConcurrentFuture = APIFuture

__all__ = ["APIFuture", "AwaitableConcurrentFuture", "RestClient", "SamplingClient",
           "ServiceClient", "TrainingClient"]

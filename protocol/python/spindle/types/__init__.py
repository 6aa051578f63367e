"""Spindle SDK types. Names and shapes follow Tinker's `tinker.types`."""

from ._catalog import (ExportPeftResponse, LineageEntry, LineageResponse, PolicyDetails,
                       PolicyInfo, PolicyListResponse, RevisionInfo)
from ._rewards import (RewardDistribution, RewardRow, RewardSample, RewardTermSummary,
                       RewardTestResponse)
from ._runs import RunInfo, RunListResponse, RunMetric, RunStartResponse, RunStatus
from ._sampling import SampledSequence, SampleResponse, SamplingParams
from ._studio import DatasetInfo, Event, RewardPlugin, SampleDelta
from ._server import (BaseInfo, GetServerCapabilitiesResponse, HandshakeInfo, LimitsInfo,
                      PlacementInfo, ServerCapabilities, ServerStatus, SupportedModel)
from ._tensor import ModelInput, TensorData
from ._training import (AdamParams, Datum, ForwardBackwardOutput, LoadStateResponse,
                        OptimStepResponse, SaveStateResponse, SaveWeightsForSamplerResponse,
                        SaveWeightsResponse, TrainingSessionInfo)
from ..errors import SpindleError

__all__ = [
    "AdamParams", "BaseInfo", "DatasetInfo", "Datum", "Event", "ExportPeftResponse", "ForwardBackwardOutput",
    "GetServerCapabilitiesResponse", "HandshakeInfo", "LimitsInfo", "LineageEntry",
    "LineageResponse", "LoadStateResponse", "ModelInput", "OptimStepResponse", "PlacementInfo",
    "PolicyDetails", "PolicyInfo", "PolicyListResponse", "RevisionInfo", "RewardDistribution", "RewardPlugin",
    "RewardRow", "RewardSample", "RewardTermSummary", "RewardTestResponse", "RunInfo",
    "RunListResponse", "RunMetric", "RunStartResponse", "RunStatus", "SampleDelta", "SampleResponse",
    "SampledSequence", "SamplingParams", "SaveStateResponse", "SaveWeightsForSamplerResponse",
    "SaveWeightsResponse", "ServerCapabilities", "ServerStatus", "SpindleError",
    "SupportedModel", "TensorData", "TrainingSessionInfo",
]

"""Spindle SDK types. Names, fields and module paths follow Tinker's `tinker.types`
(`spindle.types.tensor_data.TensorData`, `spindle.types.datum.Datum`, ...); the Spindle-only
types (catalog, runs, rewards, Studio, server status) live beside them."""

from ._catalog import (ExportPeftResponse, LineageEntry, LineageResponse, PolicyDetails,
                       PolicyInfo, PolicyListResponse, RevisionInfo)
from ._rewards import (RewardDistribution, RewardRow, RewardSample, RewardTermSummary,
                       RewardTestResponse)
from ._runs import RunInfo, RunListResponse, RunMetric, RunStartResponse, RunStatus
from ._server import (BaseInfo, BaseStatus, GetServerCapabilitiesResponse, HandshakeInfo,
                      LimitsInfo, PlacementInfo, ServerCapabilities, ServerStatus, SupportedModel)
from ._studio import DatasetInfo, Event, RewardPlugin, SampleDelta
from ._training import TrainingSessionInfo
from .checkpoint import Checkpoint, CheckpointType, ParsedCheckpointTinkerPath
from .checkpoints_list_response import CheckpointsListResponse
from .cursor import Cursor
from .datum import Datum
from .dmel_chunk import DmelChunk
from .encoded_text_chunk import EncodedTextChunk
from .forward_backward_output import ForwardBackwardOutput
from .get_info_response import GetInfoResponse, ModelData
from .image_asset_pointer_chunk import ImageAssetPointerChunk
from .image_chunk import ImageChunk
from .load_weights_response import LoadWeightsResponse
from .lora_config import LoraConfig
from .loss_fn_inputs import LossFnInputs
from .loss_fn_output import LossFnOutput
from .loss_fn_type import LossFnType
from .model_id import ModelID
from .model_input import ModelInput
from .model_input_chunk import ModelInputChunk
from .optim_step_request import AdamParams, OptimStepRequest
from .optim_step_response import OptimStepResponse
from .sample_response import SampleResponse
from .sampled_sequence import SampledSequence
from .sampling_params import SamplingParams
from .save_weights_for_sampler_response import SaveWeightsForSamplerResponse
from .save_weights_response import SaveWeightsResponse
from .stop_reason import StopReason
from .tensor_data import TensorData
from .tensor_dtype import TensorDtype
from .topk_prompt_logprobs import TopkPromptLogprobs
from .training_run import TrainingRun
from .training_runs_response import TrainingRunsResponse
from .weights_info_response import WeightsInfoResponse
from ..errors import SpindleError

# Spindle's earlier names.
LoadStateResponse = LoadWeightsResponse
SaveStateResponse = SaveWeightsResponse

__all__ = [
    # Tinker's
    "AdamParams", "Checkpoint", "CheckpointType", "CheckpointsListResponse", "Cursor", "Datum",
    "DmelChunk", "EncodedTextChunk", "ForwardBackwardOutput", "GetInfoResponse",
    "GetServerCapabilitiesResponse", "ImageAssetPointerChunk", "ImageChunk",
    "LoadWeightsResponse", "LoraConfig", "LossFnInputs", "LossFnOutput", "LossFnType", "ModelData",
    "ModelID", "ModelInput", "ModelInputChunk", "OptimStepRequest", "OptimStepResponse",
    "ParsedCheckpointTinkerPath", "SampleResponse", "SampledSequence", "SamplingParams",
    "SaveWeightsForSamplerResponse", "SaveWeightsResponse", "StopReason", "SupportedModel",
    "TensorData", "TensorDtype", "TopkPromptLogprobs", "TrainingRun", "TrainingRunsResponse",
    "WeightsInfoResponse",
    # Spindle's
    "BaseInfo", "BaseStatus", "DatasetInfo", "Event", "ExportPeftResponse", "HandshakeInfo",
    "LimitsInfo", "LineageEntry", "LineageResponse", "LoadStateResponse", "PlacementInfo",
    "PolicyDetails", "PolicyInfo", "PolicyListResponse", "RevisionInfo", "RewardDistribution",
    "RewardPlugin", "RewardRow", "RewardSample", "RewardTermSummary", "RewardTestResponse",
    "RunInfo", "RunListResponse", "RunMetric", "RunStartResponse", "RunStatus", "SampleDelta",
    "SaveStateResponse", "ServerCapabilities", "ServerStatus", "SpindleError",
    "TrainingSessionInfo",
]

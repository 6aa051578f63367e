"""TrainingClient: one LoRA training session on the daemon (Tinker's TrainingClient)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Tuple

from . import _convert, _wire
from ._futures import APIFuture
from .errors import INVALID_ARGUMENT, SpindleError, unsupported
from .sampling_client import SamplingClient
from .types import (AdamParams, Datum, ForwardBackwardOutput, GetInfoResponse,
                    LoadWeightsResponse, ModelData, OptimStepResponse,
                    SaveWeightsForSamplerResponse, SaveWeightsResponse, TensorData,
                    TrainingSessionInfo)

if TYPE_CHECKING:
    from .service_client import ServiceClient
    from .tokenizer import Tokenizer

# save_weights_and_get_sampling_client saves an ephemeral revision that lives this long (then
# the daemon collects its weights), so an RL loop that samples from every step does not fill
# the catalog. Long enough for any sampling done with it; pass ttl_seconds= for more.
SAMPLER_TTL_SECONDS = 3600

# Tinker's CustomLossFnV1: (data, logprobs per datum as torch tensors) -> (loss, metrics).
CustomLossFnV1 = Callable[[List[Datum], List[Any]], Tuple[Any, Dict[str, float]]]


class TrainingClient:
    """Every method sends at once and returns an APIFuture; several may be in flight. The
    daemon runs one session's requests in the order they were sent, so `forward_backward`
    then `optim_step` without waiting between them is correct (Tinker's pipelining).
    `*_async` coroutines submit and return the APIFuture (await it again for the result).

    The session stays open while this object lives (the SDK renews its lease); close() ends it
    at once, and so does dropping the last reference to it. Saved revisions always stay."""

    def __init__(self, service: "ServiceClient", info: TrainingSessionInfo) -> None:
        self._service = service
        self.info = info

    @property
    def session_id(self) -> str:
        return self.info.session_id

    @property
    def policy_address(self) -> str:
        return self.info.policy_address

    @property
    def model_id(self) -> str:
        """Tinker's model id: the policy address (spindle://tenant/policy)."""
        return self.info.policy_address

    # ---- forward / backward ----------------------------------------------------------------

    def _data_request(self, op: str, data: List[Datum], loss_fn: str,
                      loss_fn_config: Dict[str, float] | None) -> APIFuture[ForwardBackwardOutput]:
        frames = _wire.FrameBuilder()
        body = _convert.data_body(self.session_id, list(data), loss_fn, loss_fn_config, frames)
        return self._service._request(op, body, frames, _convert.forward_backward_output)

    def forward(self, data: List[Datum], loss_fn: str = "cross_entropy",
                loss_fn_config: Dict[str, float] | None = None) -> APIFuture[ForwardBackwardOutput]:
        """Loss and logprobs without gradients."""
        return self._data_request("forward", data, loss_fn, loss_fn_config)

    def forward_backward(self, data: List[Datum], loss_fn: str = "cross_entropy",
                         loss_fn_config: Dict[str, float] | None = None
                         ) -> APIFuture[ForwardBackwardOutput]:
        """Accumulates gradients of the summed loss; loss_fn: cross_entropy,
        importance_sampling, ppo, cispo, dro; loss_fn_config: clip_low_threshold,
        clip_high_threshold, beta."""
        return self._data_request("forward_backward", data, loss_fn, loss_fn_config)

    def forward_backward_custom(self, data: List[Datum], loss_fn: CustomLossFnV1, *,
                                loss_type_input: str = "logprobs"
                                ) -> APIFuture[ForwardBackwardOutput]:
        """Gradients of a loss computed here, in torch, from the model's logprobs (Tinker's
        forward_backward_custom): `forward` gives each datum's target logprobs; loss_fn(data,
        logprobs) returns (loss, metrics) with the logprobs as torch tensors that require grad;
        loss.backward() gives d loss / d logprob, and `forward_backward` with cross_entropy and
        weights = -d loss / d logprob then accumulates exactly the custom loss's gradient (when
        some of those are negative, which spindled's cross_entropy refuses, importance_sampling
        with logprobs = the forward's and advantages = -d loss / d logprob, the same gradient).
        The result's metrics include loss_fn's. Blocks for the forward pass; returns the future
        of the backward one. Each datum may carry only target_tokens and weights."""
        forward_data, torch = self._custom_forward_data(data, loss_type_input)
        logprobs = self.forward(forward_data, "cross_entropy").result()
        return self._custom_backward(data, loss_fn, logprobs, torch)

    async def forward_backward_custom_async(self, data: List[Datum], loss_fn: CustomLossFnV1,
                                            *, loss_type_input: str = "logprobs"
                                            ) -> APIFuture[ForwardBackwardOutput]:
        forward_data, torch = self._custom_forward_data(data, loss_type_input)
        logprobs = await self.forward(forward_data, "cross_entropy")
        return self._custom_backward(data, loss_fn, logprobs, torch)

    def _custom_forward_data(self, data: List[Datum], loss_type_input: str):
        try:
            import torch
        except ImportError:
            raise ImportError("PyTorch is not installed. Cannot run custom forward_backward.") from None
        if loss_type_input != "logprobs":
            raise ValueError(f"Unsupported loss_type_input={loss_type_input!r}. "
                             "Supported values are: logprobs")
        forward_data = []
        for datum in data:
            target = datum.loss_fn_inputs.get("target_tokens")
            if target is None:
                raise ValueError("target_tokens must be provided when using cross_entropy")
            extra = sorted(set(datum.loss_fn_inputs) - {"target_tokens", "weights"})
            if extra:
                raise ValueError("forward_backward_custom only supports loss_fn_inputs keys "
                                 f"{{'target_tokens', 'weights'}}; found unexpected keys: {extra}")
            forward_data.append(Datum(model_input=datum.model_input,
                                      loss_fn_inputs={"target_tokens": target}))
        return forward_data, torch

    def _custom_backward(self, data: List[Datum], loss_fn: CustomLossFnV1,
                         forward: ForwardBackwardOutput, torch) -> APIFuture[ForwardBackwardOutput]:
        logprobs = []
        for out in forward.loss_fn_outputs:
            lp = out["logprobs"].to_torch().to(torch.float32)
            logprobs.append(lp.clone().detach().requires_grad_(True))
        loss, metrics = loss_fn(data, logprobs)
        loss.backward()
        grads = []
        for lp in logprobs:
            if lp.grad is None:
                raise ValueError("No gradient computed for logprob tensor")
            grads.append(-lp.grad)  # -dC/dlogprobs
        signed = any(bool((g < 0).any()) for g in grads)
        linear = []
        for datum, lp, g in zip(data, logprobs, grads):
            target = datum.loss_fn_inputs["target_tokens"]
            if not signed:
                # The daemon's cross_entropy is sum(-weights * logprobs): weights = -dC/dlogprobs
                # makes its gradient the custom loss C's (Tinker's construction).
                inputs = {"target_tokens": target, "weights": TensorData.from_torch(g)}
            else:
                # spindled's cross_entropy takes weights >= 0 only. importance_sampling,
                # sum(-exp(logp - q) * advantages), with q = these logprobs (ratio 1) and
                # advantages = -dC/dlogprobs has the same gradient.
                inputs = {"target_tokens": target, "logprobs": TensorData.from_torch(lp.detach()),
                          "advantages": TensorData.from_torch(g)}
            linear.append(Datum(model_input=datum.model_input, loss_fn_inputs=inputs))
        custom = {str(k): float(v) for k, v in dict(metrics or {}).items()}

        def add_metrics(out: ForwardBackwardOutput) -> ForwardBackwardOutput:
            out.metrics.update(custom)
            return out

        loss_name = "importance_sampling" if signed else "cross_entropy"
        return self.forward_backward(linear, loss_name).then(add_metrics)

    # ---- optimizer -------------------------------------------------------------------------

    def optim_step(self, adam_params: AdamParams) -> APIFuture[OptimStepResponse]:
        body = {"session_id": self.session_id, "adam_params": _convert.adam_body(adam_params)}
        return self._service._request("optim_step", body, None, _convert.optim_step_response)

    # ---- saving and loading ----------------------------------------------------------------

    def _save(self, op: str, name: str, ttl_seconds: int | None, metrics_json: str,
              cls: type) -> APIFuture[SaveWeightsResponse]:
        if ttl_seconds is not None and int(ttl_seconds) <= 0:
            raise SpindleError(INVALID_ARGUMENT, f"ttl_seconds must be > 0 or None (durable), "
                               f"got {ttl_seconds}", op)
        body = _convert.versioned({"session_id": self.session_id, "name": str(name or ""),
                                   "metrics_json": metrics_json,
                                   "ttl_seconds": int(ttl_seconds or 0)}, _convert.SAVE_V)
        return self._service._request(op, body, None, _convert.save_response(cls))

    def save_state(self, name: str = "", ttl_seconds: int | None = None, overwrite: bool = False,
                   *, metrics_json: str = "") -> APIFuture[SaveWeightsResponse]:
        """A new revision holding weights and optimizer state (for load_state_with_optimizer
        and create_training_client_from_state_with_optimizer). ttl_seconds: an ephemeral
        revision the daemon collects that long after the save (None = durable). name is a label
        (recorded with the revision); revisions never collide, so `overwrite` has no effect."""
        del overwrite
        return self._save("save_state", name, ttl_seconds, metrics_json, SaveWeightsResponse)

    def save_weights_for_sampler(self, name: str = "", ttl_seconds: int | None = None, *,
                                 metrics_json: str = "") -> APIFuture[SaveWeightsForSamplerResponse]:
        """A new revision holding the weights; `.path` is its address (durable on reply unless
        ttl_seconds makes it ephemeral)."""
        return self._save("save_weights", name, ttl_seconds, metrics_json,
                          SaveWeightsForSamplerResponse)

    def _load(self, path: str, with_optimizer: bool,
              weights_access_token: str | None) -> APIFuture[LoadWeightsResponse]:
        if weights_access_token is not None:
            raise unsupported("load_state(weights_access_token=...)",
                              "revisions are loaded with this client's own token")
        body = _convert.versioned({"session_id": self.session_id, "address": str(path),
                                   "with_optimizer": bool(with_optimizer)}, _convert.LOAD_STATE_V)

        def convert(reply: _wire.Reply) -> LoadWeightsResponse:
            info = _convert.session_info(reply)
            self.info = info
            return LoadWeightsResponse(**vars(info), path=str(path), model_id=info.policy_address)

        return self._service._request("load_state", body, None, convert)

    def load_state(self, path: str, weights_access_token: str | None = None
                   ) -> APIFuture[LoadWeightsResponse]:
        """Loads the revision's weights; the optimizer starts fresh (Tinker's semantics)."""
        return self._load(path, False, weights_access_token)

    def load_state_with_optimizer(self, path: str, weights_access_token: str | None = None
                                  ) -> APIFuture[LoadWeightsResponse]:
        """Loads the revision's weights and, when it was saved with save_state, its AdamW
        state: training continues exactly where it left off."""
        return self._load(path, True, weights_access_token)

    def save_weights_and_get_sampling_client(self, name: str | None = None,
                                             retry_config: Any = None, *,
                                             ttl_seconds: int = SAMPLER_TTL_SECONDS
                                             ) -> SamplingClient:
        """Saves an ephemeral sampler revision (collected ttl_seconds later, default
        SAMPLER_TTL_SECONDS = 1 h) and returns a client pinned to it (blocks, as Tinker's).
        name: a label recorded with the revision."""
        del retry_config
        saved = self.save_weights_for_sampler(name or "", ttl_seconds=ttl_seconds).result()
        return self.create_sampling_client(saved.path)

    async def save_weights_and_get_sampling_client_async(self, name: str | None = None,
                                                         retry_config: Any = None, *,
                                                         ttl_seconds: int = SAMPLER_TTL_SECONDS
                                                         ) -> SamplingClient:
        del retry_config
        saved = await self.save_weights_for_sampler(name or "", ttl_seconds=ttl_seconds)
        return self.create_sampling_client(saved.path)

    def create_sampling_client(self, model_path: str, retry_config: Any = None) -> SamplingClient:
        del retry_config
        return SamplingClient(self._service, model_path, base_model=self.info.base_model)

    async def create_sampling_client_async(self, model_path: str,
                                           retry_config: Any = None) -> SamplingClient:
        return self.create_sampling_client(model_path, retry_config)

    # ---- information -----------------------------------------------------------------------

    def get_info(self) -> GetInfoResponse:
        """The model: base (arch, name, tokenizer), policy address as model_id, LoRA rank."""
        base = self._service._base_info(self.info.base_model)
        return GetInfoResponse(
            model_data=ModelData(arch=base.arch if base else None, model_name=self.info.base_model,
                                 tokenizer_id=self.info.base_model),
            model_id=self.policy_address, is_lora=True, lora_rank=int(self.info.rank),
            model_name=self.info.base_model)

    async def get_info_async(self) -> GetInfoResponse:
        return self.get_info()

    def get_base_model(self) -> str:
        return self.info.base_model

    async def get_base_model_async(self) -> str:
        return self.info.base_model

    def get_tokenizer(self) -> "Tokenizer":
        """The base's tokenizer (see spindle.tokenizer.Tokenizer)."""
        return self._service.get_tokenizer(self.info.base_model)

    @property
    def user_metadata(self) -> Dict[str, str]:
        """The user_metadata stored with the policy."""
        text = self.info.user_metadata_json
        return dict(json.loads(text)) if text else {}

    def close(self) -> None:
        """Ends the session on the daemon (saved revisions stay in the catalog)."""
        self._service._sessions.remove(self.session_id)
        self._service._request("close_training", {"session_id": self.session_id}, None,
                               lambda _: None).result()

    # ---- asyncio variants: submit, then `await` the returned APIFuture --------------------

    async def forward_async(self, data, loss_fn="cross_entropy", loss_fn_config=None):
        return self.forward(data, loss_fn, loss_fn_config)

    async def forward_backward_async(self, data, loss_fn="cross_entropy", loss_fn_config=None):
        return self.forward_backward(data, loss_fn, loss_fn_config)

    async def optim_step_async(self, adam_params: AdamParams):
        return self.optim_step(adam_params)

    async def save_weights_for_sampler_async(self, name: str = "", ttl_seconds: int | None = None,
                                             *, metrics_json: str = ""):
        return self.save_weights_for_sampler(name, ttl_seconds, metrics_json=metrics_json)

    async def save_state_async(self, name: str = "", ttl_seconds: int | None = None,
                               overwrite: bool = False, *, metrics_json: str = ""):
        return self.save_state(name, ttl_seconds, overwrite, metrics_json=metrics_json)

    async def load_state_async(self, path: str, weights_access_token: str | None = None):
        return self.load_state(path, weights_access_token)

    async def load_state_with_optimizer_async(self, path: str,
                                              weights_access_token: str | None = None):
        return self.load_state_with_optimizer(path, weights_access_token)

    def __repr__(self) -> str:
        return f"TrainingClient({self.session_id!r}, {self.policy_address!r})"

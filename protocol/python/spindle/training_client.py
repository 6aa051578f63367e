"""TrainingClient: one LoRA training session on the daemon (Tinker's TrainingClient)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import _convert, _wire
from ._futures import APIFuture
from .sampling_client import SamplingClient
from .types import (AdamParams, Datum, ForwardBackwardOutput, LoadStateResponse,
                    OptimStepResponse, SaveWeightsResponse, TrainingSessionInfo)

if TYPE_CHECKING:
    from .service_client import ServiceClient


class TrainingClient:
    """Every method sends at once and returns an APIFuture; several may be in flight. The
    daemon runs one session's requests in the order they were sent, so `forward_backward`
    then `optim_step` without waiting between them is correct (Tinker's pipelining).
    `*_async` coroutines submit and return the APIFuture (await it again for the result)."""

    def __init__(self, service: "ServiceClient", info: TrainingSessionInfo) -> None:
        self._service = service
        self.info = info

    @property
    def session_id(self) -> str:
        return self.info.session_id

    @property
    def policy_address(self) -> str:
        return self.info.policy_address

    def _data_request(self, op: str, data: list[Datum], loss_fn: str,
                      loss_fn_config: dict[str, float] | None) -> APIFuture[ForwardBackwardOutput]:
        frames = _wire.FrameBuilder()
        body = _convert.data_body(self.session_id, list(data), loss_fn, loss_fn_config, frames)
        return self._service._request(op, body, frames, _convert.forward_backward_output)

    def forward(self, data: list[Datum], loss_fn: str = "cross_entropy",
                loss_fn_config: dict[str, float] | None = None) -> APIFuture[ForwardBackwardOutput]:
        """Loss and logprobs without gradients."""
        return self._data_request("forward", data, loss_fn, loss_fn_config)

    def forward_backward(self, data: list[Datum], loss_fn: str = "cross_entropy",
                         loss_fn_config: dict[str, float] | None = None
                         ) -> APIFuture[ForwardBackwardOutput]:
        """Accumulates gradients of the summed loss; loss_fn: cross_entropy,
        importance_sampling, ppo, cispo, dro; loss_fn_config: clip_low_threshold,
        clip_high_threshold, beta."""
        return self._data_request("forward_backward", data, loss_fn, loss_fn_config)

    def optim_step(self, adam_params: AdamParams) -> APIFuture[OptimStepResponse]:
        body = {"session_id": self.session_id, "adam_params": _convert.adam_body(adam_params)}
        return self._service._request("optim_step", body, None, _convert.optim_step_response)

    def _save(self, op: str, name: str, metrics_json: str) -> APIFuture[SaveWeightsResponse]:
        body = {"session_id": self.session_id, "name": str(name), "metrics_json": metrics_json}
        return self._service._request(op, body, None, _convert.save_response)

    def save_weights_for_sampler(self, name: str = "", metrics_json: str = ""
                                 ) -> APIFuture[SaveWeightsResponse]:
        """A new revision holding the weights; `.path` is its address (durable on reply)."""
        return self._save("save_weights", name, metrics_json)

    def save_state(self, name: str = "", metrics_json: str = "") -> APIFuture[SaveWeightsResponse]:
        """A new revision holding weights and optimizer state (for load_state)."""
        return self._save("save_state", name, metrics_json)

    def load_state(self, path: str) -> APIFuture[LoadStateResponse]:
        body = {"session_id": self.session_id, "address": str(path)}
        return self._service._request("load_state", body, None, self._update_info)

    def _update_info(self, reply: _wire.Reply) -> TrainingSessionInfo:
        info = _convert.session_info(reply)
        self.info = info
        return info

    def save_weights_and_get_sampling_client(self, name: str = "") -> SamplingClient:
        """Saves a sampler revision and returns a client pinned to it (blocks, as Tinker's)."""
        return self.create_sampling_client(self.save_weights_for_sampler(name).result().path)

    def create_sampling_client(self, model_path: str) -> SamplingClient:
        return SamplingClient(self._service, model_path)

    def close(self) -> None:
        """Ends the session on the daemon (saved revisions stay in the catalog)."""
        self._service._request("close_training", {"session_id": self.session_id}, None,
                               lambda _: None).result()

    # ---- asyncio variants: submit, then `await` the returned APIFuture --------------------

    async def forward_async(self, data, loss_fn="cross_entropy", loss_fn_config=None):
        return self.forward(data, loss_fn, loss_fn_config)

    async def forward_backward_async(self, data, loss_fn="cross_entropy", loss_fn_config=None):
        return self.forward_backward(data, loss_fn, loss_fn_config)

    async def optim_step_async(self, adam_params: AdamParams):
        return self.optim_step(adam_params)

    async def save_weights_for_sampler_async(self, name: str = "", metrics_json: str = ""):
        return self.save_weights_for_sampler(name, metrics_json)

    async def save_state_async(self, name: str = "", metrics_json: str = ""):
        return self.save_state(name, metrics_json)

    async def load_state_async(self, path: str):
        return self.load_state(path)

    async def save_weights_and_get_sampling_client_async(self, name: str = "") -> SamplingClient:
        saved = await self.save_weights_for_sampler(name)
        return self.create_sampling_client(saved.path)

    def __repr__(self) -> str:
        return f"TrainingClient({self.session_id!r}, {self.policy_address!r})"

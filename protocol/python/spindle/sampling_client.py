"""SamplingClient: sampling and scoring with one policy revision or base model (Tinker's)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import _convert, _streams, _wire
from ._futures import APIFuture
from .types import ModelInput, SampleResponse, SamplingParams

if TYPE_CHECKING:
    from .service_client import ServiceClient


class SamplingClient:
    """Samples from `address`: "spindle://tenant/policy@revision" (pinned),
    "spindle://tenant/policy" or "...@latest" (the head at each request), or a bare base model
    id (no adapter). Thread-safe; requests pipeline over the ServiceClient's socket."""

    def __init__(self, service: "ServiceClient", address: str) -> None:
        self._service = service
        self.model_path = address

    def sample(self, prompt: ModelInput, num_samples: int = 1,
               sampling_params: SamplingParams | None = None) -> APIFuture[SampleResponse]:
        frames = _wire.FrameBuilder()
        body = {"address": self.model_path, "prompt": _convert.prompt_ref(prompt, frames),
                "num_samples": int(num_samples),
                "sampling_params": _convert.sampling_params_body(sampling_params or SamplingParams())}
        return self._service._request("sample", body, frames, _convert.sample_response)

    async def sample_async(self, prompt: ModelInput, num_samples: int = 1,
                           sampling_params: SamplingParams | None = None) -> SampleResponse:
        return await self.sample(prompt, num_samples, sampling_params)

    def sample_stream(self, prompt: ModelInput, num_samples: int = 1,
                      sampling_params: SamplingParams | None = None) -> "_streams.SampleStream":
        """sample() that streams: iterate for SampleDelta objects (each sequence's new tokens,
        logprobs and text pieces as the daemon produces them), the last item being the final
        SampleResponse, equal to what sample() returns for the same request and seed."""
        frames = _wire.FrameBuilder()
        body = {"address": self.model_path, "prompt": _convert.prompt_ref(prompt, frames),
                "num_samples": int(num_samples),
                "sampling_params": _convert.sampling_params_body(sampling_params or SamplingParams())}
        return _streams.SampleStream(
            self._service._transport.submit_stream("sample_stream", body, frames.frames))

    def compute_logprobs(self, prompt: ModelInput) -> APIFuture[list[float | None]]:
        """log p of each prompt token given the ones before it; entry 0 is None."""
        frames = _wire.FrameBuilder()
        body = {"address": self.model_path, "prompt": _convert.prompt_ref(prompt, frames)}
        return self._service._request("compute_logprobs", body, frames, _convert.logprobs_list)

    async def compute_logprobs_async(self, prompt: ModelInput) -> list[float | None]:
        return await self.compute_logprobs(prompt)

    def __repr__(self) -> str:
        return f"SamplingClient({self.model_path!r})"

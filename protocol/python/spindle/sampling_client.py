"""SamplingClient: sampling and scoring with one policy revision or base model (Tinker's)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import _convert, _streams, _wire
from ._futures import APIFuture
from .types import ModelInput, SampleResponse, SamplingParams

if TYPE_CHECKING:
    from .service_client import ServiceClient
    from .tokenizer import Tokenizer


class SamplingClient:
    """Samples from `address`: "spindle://tenant/policy@revision" (pinned),
    "spindle://tenant/policy" or "...@latest" (the head at each request), or a bare base model
    id (no adapter). Thread-safe; requests pipeline over the ServiceClient's socket.
    base_model: the base the address runs on, when the creator knows it (else looked up in the
    catalog on first need)."""

    def __init__(self, service: "ServiceClient", address: str, base_model: str | None = None) -> None:
        self._service = service
        self.model_path = address
        self._base_model = base_model or (None if address.startswith("spindle://") else address)

    def _sample_body(self, prompt: ModelInput, num_samples: int,
                     sampling_params: SamplingParams | None, frames: _wire.FrameBuilder) -> dict:
        return {"address": self.model_path, "prompt": _convert.prompt_ref(prompt, frames),
                "num_samples": int(num_samples),
                "sampling_params": _convert.sampling_params_body(sampling_params or SamplingParams())}

    def sample(self, prompt: ModelInput, num_samples: int = 1,
               sampling_params: SamplingParams | None = None,
               include_prompt_logprobs: bool = False,
               topk_prompt_logprobs: int = 0) -> APIFuture[SampleResponse]:
        """num_samples completions of `prompt`. include_prompt_logprobs: also the log p of
        each prompt token (SampleResponse.prompt_logprobs, entry 0 None); topk_prompt_logprobs
        = k (0..20): also the k most likely tokens at each prompt position
        (SampleResponse.topk_prompt_logprobs)."""
        frames = _wire.FrameBuilder()
        body = self._sample_body(prompt, num_samples, sampling_params, frames)
        body["include_prompt_logprobs"] = bool(include_prompt_logprobs)
        body["topk_prompt_logprobs"] = int(topk_prompt_logprobs or 0)
        return self._service._request("sample", _convert.versioned(body, _convert.SAMPLE_V),
                                      frames, _convert.sample_response)

    async def sample_async(self, prompt: ModelInput, num_samples: int = 1,
                           sampling_params: SamplingParams | None = None,
                           include_prompt_logprobs: bool = False,
                           topk_prompt_logprobs: int = 0) -> SampleResponse:
        return await self.sample(prompt, num_samples, sampling_params, include_prompt_logprobs,
                                 topk_prompt_logprobs)

    def sample_stream(self, prompt: ModelInput, num_samples: int = 1,
                      sampling_params: SamplingParams | None = None) -> "_streams.SampleStream":
        """sample() that streams: iterate for SampleDelta objects (each sequence's new tokens,
        logprobs and text pieces as the daemon produces them), the last item being the final
        SampleResponse, equal to what sample() returns for the same request and seed."""
        frames = _wire.FrameBuilder()
        body = self._sample_body(prompt, num_samples, sampling_params, frames)
        return _streams.SampleStream(
            self._service._transport.submit_stream("sample_stream", body, frames.frames))

    def compute_logprobs(self, prompt: ModelInput) -> APIFuture[list[float | None]]:
        """log p of each prompt token given the ones before it; entry 0 is None."""
        frames = _wire.FrameBuilder()
        body = {"address": self.model_path, "prompt": _convert.prompt_ref(prompt, frames)}
        return self._service._request("compute_logprobs", body, frames, _convert.logprobs_list)

    async def compute_logprobs_async(self, prompt: ModelInput) -> list[float | None]:
        return await self.compute_logprobs(prompt)

    def get_base_model(self) -> str:
        """The base model id this client samples on."""
        if self._base_model is None:
            self._base_model = self._service.show(self.model_path).policy.base_id
        return self._base_model

    async def get_base_model_async(self) -> str:
        return self.get_base_model()

    def get_tokenizer(self) -> "Tokenizer":
        """The base's tokenizer (see spindle.tokenizer.Tokenizer)."""
        return self._service.get_tokenizer(self.get_base_model())

    def __repr__(self) -> str:
        return f"SamplingClient({self.model_path!r})"

"""Stand-in for the cookbook's tokenizer_utils.get_tokenizer (which loads from the Hugging Face
hub): the base's own tokenizer from the daemon at $SPINDLE_ENDPOINT ($SPINDLE_TOKEN)."""

from __future__ import annotations

from typing import Any

import spindle as tinker

Tokenizer = Any
_service: tinker.ServiceClient | None = None


def get_tokenizer(model_name: str) -> Tokenizer:
    global _service
    if _service is None:
        _service = tinker.ServiceClient()
    return _service.create_sampling_client(base_model=model_name).get_tokenizer()

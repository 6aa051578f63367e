"""Stand-in for the cookbook's supervised/common.py (same names, signatures and logic)."""

from __future__ import annotations

import logging
import math
from typing import Literal

import spindle as tinker
import torch

logger = logging.getLogger(__name__)


class DataValidationError(ValueError):
    pass


def compute_mean_nll(logprobs_list: list[tinker.TensorData],
                     weights_list: list[tinker.TensorData]) -> float:
    """-sum(logprobs * weights) / sum(weights) over the batch."""
    total_weighted_logprobs = 0.0
    total_weights = 0.0
    for logprobs, weights in zip(logprobs_list, weights_list):
        logprobs_torch = logprobs.to_torch()
        weights_torch = weights.to_torch()
        total_weighted_logprobs += logprobs_torch.dot(weights_torch)
        total_weights += weights_torch.sum()
    if total_weights == 0:
        logger.warning("No valid weights found for NLL computation")
        return float("nan")
    return float(-total_weighted_logprobs / total_weights)


def compute_bpb(logprobs_list, weights_list, target_tokens_list, tokenizer) -> float:
    """Bits per byte of the trained, non-special target tokens (decoded per contiguous run)."""
    special_ids = set(tokenizer.all_special_ids)
    total_nll_nats = 0.0
    total_bytes = 0
    for logprobs, weights, target_tokens in zip(logprobs_list, weights_list, target_tokens_list):
        token_ids = [int(t) for t in target_tokens.data]
        counted = [w > 0 and t not in special_ids for w, t in zip(weights.data, token_ids)]
        mask = torch.tensor(counted, dtype=torch.bool)
        total_nll_nats += float(-logprobs.to_torch()[mask].sum())
        run: list[int] = []
        for token, count in zip(token_ids + [None], counted + [False]):
            if count:
                run.append(token)
            elif run:
                total_bytes += len(tokenizer.decode(run).encode("utf-8"))
                run = []
    if total_bytes == 0:
        return float("nan")
    return float(total_nll_nats / (math.log(2) * total_bytes))


def create_rightshifted_model_input_and_leftshifted_targets(
        chunks: list[tinker.ModelInputChunk]) -> tuple[tinker.ModelInput, list[int]]:
    assert len(chunks) >= 1, "must have at least one chunk"
    last_chunk = chunks[-1]
    if not isinstance(last_chunk, tinker.types.EncodedTextChunk):
        raise DataValidationError("The last chunk must be a text chunk.")
    total_length = sum(c.length for c in chunks)
    if total_length < 2:
        raise DataValidationError("need at least 2 tokens for input/target split")
    input_chunks: list[tinker.ModelInputChunk] = list(chunks[:-1])
    if last_chunk.length > 1:
        input_chunks.append(tinker.types.EncodedTextChunk(tokens=last_chunk.tokens[:-1]))
    all_tokens: list[int] = []
    for chunk in chunks:
        if isinstance(chunk, tinker.types.EncodedTextChunk):
            all_tokens.extend(chunk.tokens)
        else:
            all_tokens.extend([0] * chunk.length)
    return tinker.ModelInput(chunks=input_chunks), all_tokens[1:]


def datum_from_model_input_weights(model_input: tinker.ModelInput, weights: torch.Tensor,
                                   max_length: int | None = None,
                                   reduction: Literal["none", "mean"] = "none") -> tinker.Datum:
    """Truncate to max_length, shift for next-token prediction, reduce the weights."""
    model_input_chunks = list(model_input.chunks)
    if max_length is not None:
        total_length = sum(chunk.length for chunk in model_input_chunks)
        while total_length > max_length and model_input_chunks:
            last = model_input_chunks[-1]
            if isinstance(last, tinker.types.EncodedTextChunk):
                overflow = total_length - max_length
                if overflow < last.length:
                    model_input_chunks[-1] = tinker.types.EncodedTextChunk(
                        tokens=list(last.tokens[:-overflow]))
                    total_length = max_length
                else:
                    model_input_chunks.pop()
                    total_length -= last.length
            else:
                model_input_chunks.pop()
                total_length -= last.length
    model_input_chunks = [c for c in model_input_chunks
                          if not (isinstance(c, tinker.types.EncodedTextChunk) and c.length == 0)]
    while model_input_chunks and isinstance(model_input_chunks[-1], tinker.types.ImageChunk):
        model_input_chunks.pop()
    input_model_input, target_tokens = create_rightshifted_model_input_and_leftshifted_targets(
        model_input_chunks)
    weights = weights[1: len(target_tokens) + 1]
    if reduction == "mean":
        total = float(weights.sum())
        if total > 0:
            weights = weights / total
    elif reduction != "none":
        raise ValueError(f"Unknown reduction mode: {reduction!r}")
    return tinker.Datum(
        model_input=input_model_input,
        loss_fn_inputs={
            "weights": tinker.TensorData(data=weights.tolist(), dtype="float32",
                                         shape=list(weights.shape)),
            "target_tokens": tinker.TensorData(data=target_tokens, dtype="int64",
                                               shape=[len(target_tokens)]),
        },
    )

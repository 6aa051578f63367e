"""Stand-in for the cookbook's supervised/data.py: conversation_to_datum."""

from __future__ import annotations

from typing import Literal

import spindle as tinker

from tinker_cookbook.renderers import Message, Renderer, TrainOnWhat
from tinker_cookbook.supervised.common import datum_from_model_input_weights


def conversation_to_datum(conversation: list[Message], renderer: Renderer, max_length: int | None,
                          train_on_what: TrainOnWhat = TrainOnWhat.ALL_ASSISTANT_MESSAGES,
                          reduction: Literal["none", "mean"] = "mean") -> tinker.Datum:
    model_input, weights = renderer.build_supervised_example(conversation,
                                                             train_on_what=train_on_what)
    return datum_from_model_input_weights(model_input, weights, max_length, reduction=reduction)

"""Stand-in for the cookbook's renderers (renderers/base.py and renderers/role_colon.py): the
same Renderer structure (render_message -> header / output / stop_overlap chunks, the generation
prompt and the supervised example built from them) and RoleColonRenderer, written against the
tokenizer the SDK returns (encode with add_special_tokens=False, decode, bos_token, eos_token_id).
Tool calls, thinking parts and images are left out."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, TypedDict

import spindle as tinker
import torch

Role = str


class Message(TypedDict, total=False):
    role: str
    content: Any
    trainable: bool


class TrainOnWhat(str, enum.Enum):
    LAST_ASSISTANT_MESSAGE = "last_assistant_message"
    LAST_ASSISTANT_TURN = "last_assistant_turn"
    ALL_ASSISTANT_MESSAGES = "all_assistant_messages"
    ALL_MESSAGES = "all_messages"
    ALL_TOKENS = "all_tokens"
    ALL_USER_AND_SYSTEM_MESSAGES = "all_user_and_system_messages"
    CUSTOMIZED = "customized"


class ParseTermination(enum.Enum):
    STOP_SEQUENCE = "stop_sequence"
    EOS = "eos"
    MALFORMED = "malformed"


@dataclass
class RenderContext:
    idx: int
    is_last: bool
    prev_message: Message | None = None
    next_message: Message | None = None
    last_user_index: int = -1
    in_last_assistant_turn: bool = False


@dataclass
class RenderedMessage:
    header: tinker.EncodedTextChunk | None
    output: list = field(default_factory=list)
    stop_overlap: tinker.EncodedTextChunk | None = None


def ensure_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content if p.get("type") == "text")


def get_text_content(message: Message) -> str:
    return ensure_text(message["content"])


class Renderer:
    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer

    @property
    def has_extension_property(self) -> bool:
        return False

    @property
    def _bos_tokens(self) -> list[int]:
        return []

    def get_stop_sequences(self) -> list[str] | list[int]:
        raise NotImplementedError

    def render_message(self, message: Message, ctx: RenderContext) -> RenderedMessage:
        raise NotImplementedError

    def parse_response(self, response: list[int]) -> tuple[Message, ParseTermination]:
        raise NotImplementedError

    def _last_assistant_turn_start_index(self, messages: list[Message]) -> int:
        last_user = max((i for i, m in enumerate(messages) if m["role"] == "user"), default=-1)
        return last_user + 1

    def _get_generation_suffix(self, role: Role, ctx: RenderContext) -> list[int]:
        rendered = self.render_message(Message(role=role, content=""), ctx)
        if rendered.header:
            return list(rendered.header.tokens)
        return []

    def build_generation_prompt(self, messages: list[Message], role: Role = "assistant",
                                prefill: str | None = None) -> tinker.ModelInput:
        chunks: list[tinker.types.ModelInputChunk] = []
        if self._bos_tokens:
            chunks.append(tinker.types.EncodedTextChunk(tokens=self._bos_tokens))
        last_user_idx = max((i for i, m in enumerate(messages) if m["role"] == "user"), default=-1)
        turn_start = self._last_assistant_turn_start_index(messages)
        for idx, message in enumerate(messages):
            ctx = RenderContext(idx=idx, is_last=(idx == len(messages) - 1),
                                prev_message=messages[idx - 1] if idx > 0 else None,
                                next_message=messages[idx + 1] if idx + 1 < len(messages) else None,
                                last_user_index=last_user_idx,
                                in_last_assistant_turn=idx >= turn_start)
            rendered = self.render_message(message, ctx)
            if rendered.header:
                chunks.append(rendered.header)
            chunks.extend([x for x in rendered.output
                           if not isinstance(x, tinker.EncodedTextChunk) or x.tokens])
        suffix_ctx = RenderContext(idx=len(messages), is_last=True,
                                   prev_message=messages[-1] if messages else None,
                                   last_user_index=last_user_idx, in_last_assistant_turn=True)
        suffix = self._get_generation_suffix(role, suffix_ctx)
        if suffix:
            chunks.append(tinker.types.EncodedTextChunk(tokens=suffix))
        if prefill:
            chunks.append(tinker.types.EncodedTextChunk(
                tokens=self.tokenizer.encode(prefill, add_special_tokens=False)))
        return tinker.ModelInput(chunks=chunks)

    def _output_is_trained(self, message: Message, ctx: RenderContext,
                           train_on_what: TrainOnWhat) -> bool:
        is_assistant = message["role"] == "assistant"
        if train_on_what == TrainOnWhat.LAST_ASSISTANT_MESSAGE:
            return ctx.is_last and is_assistant
        if train_on_what == TrainOnWhat.LAST_ASSISTANT_TURN:
            return is_assistant and ctx.in_last_assistant_turn
        if train_on_what == TrainOnWhat.ALL_ASSISTANT_MESSAGES:
            return is_assistant
        if train_on_what in (TrainOnWhat.ALL_MESSAGES, TrainOnWhat.ALL_TOKENS):
            return True
        if train_on_what == TrainOnWhat.ALL_USER_AND_SYSTEM_MESSAGES:
            return message["role"] in ("user", "system")
        return bool(message.get("trainable", False))

    def build_supervised_example(self, messages: list[Message],
                                 train_on_what: TrainOnWhat = TrainOnWhat.LAST_ASSISTANT_MESSAGE
                                 ) -> tuple[tinker.ModelInput, torch.Tensor]:
        chunks_weights: list[tuple[tinker.types.ModelInputChunk, float]] = []
        if self._bos_tokens:
            chunks_weights.append((tinker.types.EncodedTextChunk(tokens=self._bos_tokens), 0.0))
        last_user_idx = max((i for i, m in enumerate(messages) if m["role"] == "user"), default=-1)
        turn_start = self._last_assistant_turn_start_index(messages[:-1])
        for idx, message in enumerate(messages):
            is_last = idx == len(messages) - 1
            ctx = RenderContext(idx=idx, is_last=is_last,
                                prev_message=messages[idx - 1] if idx > 0 else None,
                                next_message=messages[idx + 1] if idx + 1 < len(messages) else None,
                                last_user_index=last_user_idx,
                                in_last_assistant_turn=idx >= turn_start)
            rendered = self.render_message(message, ctx)
            header_weight = int(train_on_what == TrainOnWhat.ALL_TOKENS)
            if rendered.header:
                chunks_weights.append((rendered.header, header_weight))
            trained = self._output_is_trained(message, ctx, train_on_what)
            chunks_weights += [(part, int(trained)) for part in rendered.output if part]
            if is_last and rendered.stop_overlap:
                chunks_weights.append((rendered.stop_overlap, int(trained)))
        weights = torch.tensor([w for chunk, w in chunks_weights for _ in range(chunk.length)],
                               dtype=torch.float32)
        return tinker.ModelInput(chunks=[c for c, _ in chunks_weights]), weights


_CONTENT_PREFIX = " "
_CONTENT_SUFFIX = "\n\n"


class RoleColonRenderer(Renderer):
    """`User: <content>\\n\\nAssistant: <content>\\n\\n` (the cookbook's role_colon.py)."""

    @property
    def has_extension_property(self) -> bool:
        return True

    def render_message(self, message: Message, ctx: RenderContext) -> RenderedMessage:
        header_str = message["role"].capitalize() + ":"
        output_str = _CONTENT_PREFIX + ensure_text(message["content"]) + _CONTENT_SUFFIX
        stop_overlap_str = "User:" if message["role"] == "assistant" else "<UNUSED>"
        header = tinker.types.EncodedTextChunk(
            tokens=self.tokenizer.encode(header_str, add_special_tokens=False))
        output = [tinker.types.EncodedTextChunk(
            tokens=self.tokenizer.encode(output_str, add_special_tokens=False))]
        stop_overlap = tinker.types.EncodedTextChunk(
            tokens=self.tokenizer.encode(stop_overlap_str, add_special_tokens=False))
        return RenderedMessage(header=header, output=output, stop_overlap=stop_overlap)

    def get_stop_sequences(self) -> list[str]:
        return ["\n\nUser:"]

    def parse_response(self, response: list[int]) -> tuple[Message, ParseTermination]:
        terminated_with_eos = False
        eos_token_id = self.tokenizer.eos_token_id
        if eos_token_id is not None and response and response[-1] == eos_token_id:
            response = response[:-1]
            terminated_with_eos = True
        str_response = str(self.tokenizer.decode(response))
        splitted = str_response.split("\n\nUser:")
        content = splitted[0].removeprefix(_CONTENT_PREFIX).removesuffix(_CONTENT_SUFFIX)
        if len(splitted) == 1:
            return (Message(role="assistant", content=content),
                    ParseTermination.EOS if terminated_with_eos else ParseTermination.MALFORMED)
        if len(splitted) == 2 and not terminated_with_eos:
            return Message(role="assistant", content=content), ParseTermination.STOP_SEQUENCE
        return Message(role="assistant", content=content), ParseTermination.MALFORMED

    @property
    def _bos_tokens(self) -> list[int]:
        bos_token_str = self.tokenizer.bos_token
        if bos_token_str is None:
            return []
        assert isinstance(bos_token_str, str)
        return self.tokenizer.encode(bos_token_str, add_special_tokens=False)


def get_renderer(name: str, tokenizer: Any) -> Renderer:
    if name == "role_colon":
        return RoleColonRenderer(tokenizer)
    raise ValueError(f"renderer {name!r} is not among the stand-ins (role_colon)")

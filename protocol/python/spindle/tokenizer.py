"""The tokenizer `get_tokenizer()` returns: the base's own tokenizer, run by the daemon.

encode/decode go to the daemon ops `tokenize` and `detokenize` (the exact tokenizer the base
samples and trains with) and are cached (LRU, per tokenizer object); `tokenizer_info` (special
tokens, the chat template) is read once. The object offers the subset of Hugging Face's
PreTrainedTokenizer that the Tinker cookbook's renderers use. Thread-safe.

Chat templates are rendered here, the way transformers does (`apply_chat_template`): Jinja2's
ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks, the loopcontrols extension,
`raise_exception`, `strftime_now`, a `tojson` filter that keeps non-ASCII text, `{% generation %}`
blocks accepted, and the special tokens (`bos_token`, `eos_token`, ...) as variables. It needs
the jinja2 package (Debian: python3-jinja2).
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from datetime import datetime
from typing import TYPE_CHECKING, Any, Iterable, Sequence

import numpy as np

from . import _wire
from .errors import FAILED_PRECONDITION, SpindleError

if TYPE_CHECKING:
    from .service_client import ServiceClient

CACHE_ENTRIES = 8192  # per tokenizer and direction


class _Lru:
    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._items: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key):
        with self._lock:
            if key not in self._items:
                return None
            self._items.move_to_end(key)
            return self._items[key]

    def put(self, key, value) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self._capacity:
                self._items.popitem(last=False)


def _ids(token_ids: Any) -> list[int]:
    """int, list, tuple, numpy array or torch tensor -> flat list of ints."""
    if isinstance(token_ids, (int, np.integer)):
        return [int(token_ids)]
    if hasattr(token_ids, "tolist"):
        token_ids = token_ids.tolist()
        if isinstance(token_ids, int):
            return [token_ids]
    return [int(t) for t in token_ids]


class Tokenizer:
    """The tokenizer of base `name_or_path` on the daemon `service` talks to.

    Hugging Face names: encode, decode, batch_decode, __call__ (input_ids/attention_mask),
    apply_chat_template, convert_tokens_to_ids, convert_ids_to_tokens, bos_token(_id),
    eos_token(_id), pad_token(_id), all_special_ids, all_special_tokens, special_tokens_map,
    vocab_size, len(), name_or_path, chat_template. `kind` is the daemon's ("llama2c" | "bpe").
    """

    def __init__(self, service: "ServiceClient", base_model: str) -> None:
        self._service = service
        info = service._call("tokenizer_info", {"base_model": str(base_model)}, lambda r: r.body)
        self.name_or_path: str = str(info.get("base_model") or base_model)
        self.kind: str = str(info.get("kind", ""))
        self.vocab_size: int = int(info.get("vocab_size", 0))
        self.chat_template: str | None = str(info.get("chat_template", "")) or None
        self.add_bos_token: bool = bool(info.get("add_bos_token", False))
        self._special: dict[int, str] = {int(s["id"]): str(s["text"])
                                         for s in info.get("special_tokens", [])}
        self._special_ids = {text: i for i, text in self._special.items()}

        def token(id_key: str, text_key: str) -> tuple[int | None, str | None]:
            i = int(info.get(id_key, -1))
            return (None, None) if i < 0 else (i, str(info.get(text_key, "")) or None)

        self.bos_token_id, self.bos_token = token("bos_token", "bos_text")
        self.eos_token_id, self.eos_token = token("eos_token", "eos_text")
        self.pad_token_id, self.pad_token = token("pad_token", "pad_text")
        self.unk_token_id: int | None = None
        self.unk_token: str | None = None
        self._encoded = _Lru(CACHE_ENTRIES)
        self._decoded = _Lru(CACHE_ENTRIES)
        self._template = None  # compiled lazily
        self._template_source: str | None = None

    # ---- encode / decode -----------------------------------------------------------------

    def _encode_future(self, text: str, add_special_tokens: bool):
        body = {"base_model": self.name_or_path, "text": str(text),
                "add_special_tokens": bool(add_special_tokens)}
        return self._service._request(
            "tokenize", body, None,
            lambda r: [int(t) for t in _wire.read_tensor(r.body["tokens"], r.frames, "tokens")])

    def encode(self, text: str, add_special_tokens: bool = True, **kwargs: Any) -> list[int]:
        """Token ids of `text`; add_special_tokens adds what the tokenizer adds (llama2.c: BOS;
        a Hugging Face tokenizer: per its tokenizer_config.json). Special tokens written in the
        text are recognised. Other HF keyword arguments (truncation, ...) are not supported."""
        _no_extra_kwargs("encode", kwargs, allowed={"return_tensors": None})
        key = (str(text), bool(add_special_tokens))
        hit = self._encoded.get(key)
        if hit is None:
            hit = tuple(self._encode_future(*key).result())
            self._encoded.put(key, hit)
        return list(hit)

    def _encode_many(self, texts: Sequence[str], add_special_tokens: bool) -> list[list[int]]:
        """encode() of each text, the misses sent at once (pipelined)."""
        out: list[list[int] | None] = []
        pending = {}
        for i, text in enumerate(texts):
            key = (str(text), bool(add_special_tokens))
            hit = self._encoded.get(key)
            out.append(None if hit is None else list(hit))
            if hit is None:
                pending[i] = (key, self._encode_future(*key))
        for i, (key, future) in pending.items():
            ids = future.result()
            self._encoded.put(key, tuple(ids))
            out[i] = ids
        return out  # type: ignore[return-value]

    def decode(self, token_ids: Any, skip_special_tokens: bool = False, **kwargs: Any) -> str:
        """The text of `token_ids` (an int, a list, a numpy array or a torch tensor)."""
        kwargs.pop("clean_up_tokenization_spaces", None)
        _no_extra_kwargs("decode", kwargs)
        ids = _ids(token_ids)
        key = (tuple(ids), bool(skip_special_tokens))
        hit = self._decoded.get(key)
        if hit is None:
            frames = _wire.FrameBuilder()
            body = {"base_model": self.name_or_path, "tokens": frames.add(ids, "int32"),
                    "skip_special_tokens": bool(skip_special_tokens)}
            hit = self._service._call("detokenize", body, lambda r: str(r.body.get("text", "")),
                                      frames)
            self._decoded.put(key, hit)
        return hit

    def batch_decode(self, sequences: Iterable[Any], skip_special_tokens: bool = False,
                     **kwargs: Any) -> list[str]:
        return [self.decode(s, skip_special_tokens=skip_special_tokens, **kwargs) for s in sequences]

    def __call__(self, text: str | Sequence[str], add_special_tokens: bool = True,
                 **kwargs: Any) -> dict:
        """HF's tokenizer(text): {"input_ids": ..., "attention_mask": ...} for one text or a
        list of texts (no padding, truncation or tensors)."""
        for name in ("padding", "truncation"):
            if kwargs.pop(name, False):
                raise SpindleError(FAILED_PRECONDITION, f"Tokenizer(..., {name}=True) is not "
                                   "supported; pad or truncate the ids yourself")
        kwargs.pop("max_length", None)
        _no_extra_kwargs("__call__", kwargs, allowed={"return_tensors": None,
                                                      "return_attention_mask": None})
        if isinstance(text, str):
            ids = self.encode(text, add_special_tokens=add_special_tokens)
            return {"input_ids": ids, "attention_mask": [1] * len(ids)}
        many = self._encode_many(list(text), add_special_tokens)
        return {"input_ids": many, "attention_mask": [[1] * len(i) for i in many]}

    # ---- special tokens ------------------------------------------------------------------

    @property
    def all_special_ids(self) -> list[int]:
        return sorted(self._special)

    @property
    def all_special_tokens(self) -> list[str]:
        return [self._special[i] for i in sorted(self._special)]

    @property
    def special_tokens_map(self) -> dict[str, str]:
        out = {}
        for name in ("bos_token", "eos_token", "unk_token", "pad_token"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        return out

    def convert_tokens_to_ids(self, tokens: str | Sequence[str]) -> int | None | list[int | None]:
        """A special token's id; another token string: its id when it encodes to exactly one
        token, else None (the daemon exposes no vocabulary table)."""
        if isinstance(tokens, str):
            return self._token_to_id(tokens)
        return [self._token_to_id(t) for t in tokens]

    def _token_to_id(self, token: str) -> int | None:
        if token in self._special_ids:
            return self._special_ids[token]
        ids = self.encode(token, add_special_tokens=False)
        return ids[0] if len(ids) == 1 else None

    def convert_ids_to_tokens(self, ids: int | Sequence[int]) -> str | list[str]:
        """Special tokens by their text, others decoded one by one."""
        if isinstance(ids, (int, np.integer)):
            return self._special.get(int(ids)) or self.decode([int(ids)])
        return [self._special.get(int(i)) or self.decode([int(i)]) for i in ids]

    def __len__(self) -> int:
        return self.vocab_size

    def __repr__(self) -> str:
        return f"spindle.Tokenizer({self.name_or_path!r}, kind={self.kind!r}, vocab_size={self.vocab_size})"

    # ---- chat templates ------------------------------------------------------------------

    def apply_chat_template(self, conversation: Sequence[dict] | Sequence[Sequence[dict]],
                            tools: list | None = None, documents: list | None = None,
                            chat_template: str | None = None, add_generation_prompt: bool = False,
                            continue_final_message: bool = False, tokenize: bool = True,
                            padding: bool = False, truncation: bool = False,
                            max_length: int | None = None, return_tensors: str | None = None,
                            return_dict: bool = False, tokenizer_kwargs: dict | None = None,
                            **kwargs: Any) -> Any:
        """Renders `conversation` (a list of {"role", "content", ...} messages, or a list of
        such lists) with the base's chat template (or `chat_template`), as transformers does:
        the text, or with tokenize=True its ids (encode(text, add_special_tokens=False)), or
        with return_dict=True {"input_ids", "attention_mask"}. Extra keyword arguments are
        template variables (e.g. enable_thinking)."""
        if padding or truncation or max_length is not None or return_tensors is not None:
            raise SpindleError(FAILED_PRECONDITION, "apply_chat_template: padding, truncation, "
                               "max_length and return_tensors are not supported")
        batched = bool(conversation) and isinstance(conversation[0], (list, tuple))
        conversations = list(conversation) if batched else [conversation]
        template = self._compiled(chat_template)
        variables = dict(self.special_tokens_map)
        variables.update(kwargs)
        rendered = []
        for chat in conversations:
            messages = [dict(m) for m in chat]
            text = template.render(messages=messages, tools=tools, documents=documents,
                                   add_generation_prompt=add_generation_prompt, **variables)
            if continue_final_message:
                final = messages[-1].get("content") if messages else None
                if not isinstance(final, str) or final.strip() not in text:
                    raise SpindleError(FAILED_PRECONDITION, "continue_final_message: the final "
                                       "message's text content is not in the rendered template")
                final = final.strip()
                text = text[: text.rindex(final) + len(final)]
            rendered.append(text)
        if not tokenize:
            return rendered if batched else rendered[0]
        encoded = self._encode_many(rendered, add_special_tokens=False)
        if return_dict:
            masks = [[1] * len(i) for i in encoded]
            return ({"input_ids": encoded, "attention_mask": masks} if batched
                    else {"input_ids": encoded[0], "attention_mask": masks[0]})
        return encoded if batched else encoded[0]

    def _compiled(self, chat_template: str | None):
        source = chat_template or self.chat_template
        if not source:
            raise SpindleError(FAILED_PRECONDITION,
                               f"base '{self.name_or_path}' has no chat template (its "
                               "tokenizer_config.json has no chat_template); pass chat_template= "
                               "or use a renderer that builds the prompt from tokens")
        if self._template is not None and self._template_source == source:
            return self._template
        compiled = compile_chat_template(source)
        if chat_template is None:
            self._template, self._template_source = compiled, source
        return compiled


def _no_extra_kwargs(call: str, kwargs: dict, allowed: dict | None = None) -> None:
    for name, value in kwargs.items():
        if allowed is not None and name in allowed and value == allowed[name]:
            continue
        raise TypeError(f"Tokenizer.{call}: argument {name}={value!r} is not supported")


def compile_chat_template(source: str) -> Any:
    """A jinja2 Template for `source` in transformers' environment (see the module comment).
    SpindleError("failed_precondition") when jinja2 is not installed."""
    try:
        import jinja2
        import jinja2.ext
        import jinja2.nodes
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError as e:
        raise SpindleError(FAILED_PRECONDITION, "apply_chat_template needs the jinja2 package "
                           f"(Debian: python3-jinja2; pip: jinja2): {e}") from None

    class GenerationBlocks(jinja2.ext.Extension):
        """{% generation %}...{% endgeneration %} (transformers' assistant-mask marker): the body
        is rendered as is."""
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.Scope(body, lineno=lineno)

    def raise_exception(message: str):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(fmt: str) -> str:
        return datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationBlocks, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env.from_string(source)


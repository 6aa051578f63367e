"""The SDK's one serializer module: J-encoded request headers, tensor frames, reply decoding.

Wire format (protocol/PROTOCOL.md, messages.h, wire.h):
  request = [b"J" + JSON header][frame 0][frame 1]...
  header  = {"protocol_version": 1, "request_id": N, "token": "...", "op": "<op>", "body": {...}}
  reply   = [b"J" + {"protocol_version", "request_id", "op", "ok", "error" | "body"}][frames...]
cereal reads every field of every struct (no defaults on input) and wants
"cereal_class_version" in the first object of each type; `encode_request` adds it to every
object below the header, so message dicts built by the SDK hold only the struct's own fields.
Tensors travel as raw little-endian frames named by {"frame", "dtype", "shape"}; frame indices
count from the first frame after the header.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .errors import BAD_REPLY, SpindleError

PROTOCOL_VERSION = 1
ENCODING_JSON = b"J"
_CLASS_VERSION = "cereal_class_version"

# Wire dtype name -> numpy little-endian dtype.
WIRE_DTYPES = {"int32": np.dtype("<i4"), "float32": np.dtype("<f4"), "uint8": np.dtype("u1")}


class FrameBuilder:
    """Collects the tensor frames of one request; `add` returns the TensorRef dict."""

    def __init__(self) -> None:
        self.frames: list[bytes] = []

    def add(self, values: Any, dtype: str) -> dict:
        array = np.ascontiguousarray(np.asarray(values), dtype=WIRE_DTYPES[dtype])
        if array.ndim == 0:
            array = array.reshape(1)
        self.frames.append(array.tobytes())
        return {"frame": len(self.frames) - 1, "dtype": dtype, "shape": [int(n) for n in array.shape]}

    def add_bytes(self, data: bytes) -> dict:
        self.frames.append(bytes(data))
        return {"frame": len(self.frames) - 1, "dtype": "uint8", "shape": [len(data)]}


def _with_class_versions(value: Any) -> Any:
    if isinstance(value, dict):
        out = {k: _with_class_versions(v) for k, v in value.items()}
        out.setdefault(_CLASS_VERSION, 1)
        return out
    if isinstance(value, (list, tuple)):
        return [_with_class_versions(v) for v in value]
    return value


def encode_request(request_id: int, token: str, op: str, body: dict,
                   frames: list[bytes]) -> list[bytes]:
    """The multipart message for one request. Raises ValueError for non-finite floats."""
    header = {"protocol_version": PROTOCOL_VERSION, "request_id": int(request_id),
              "token": token, "op": op, "body": _with_class_versions(body)}
    text = json.dumps(header, allow_nan=False, separators=(",", ":"), ensure_ascii=False)
    return [ENCODING_JSON + text.encode("utf-8"), *frames]


@dataclass
class Reply:
    request_id: int
    op: str
    ok: bool
    body: dict = field(default_factory=dict)
    error: dict = field(default_factory=dict)
    frames: list[bytes] = field(default_factory=list)

    def raise_if_error(self) -> None:
        if not self.ok:
            raise SpindleError.from_wire(self.error, self.op)


def decode_reply(parts: list[bytes]) -> Reply:
    """Parses a reply; raises SpindleError(bad_reply) when the header is not a J reply."""
    if not parts or not parts[0]:
        raise SpindleError(BAD_REPLY, "empty reply")
    head = parts[0]
    if head[:1] != ENCODING_JSON:
        raise SpindleError(BAD_REPLY, f"reply encoding byte {head[:1]!r}, expected b'J'")
    try:
        obj = json.loads(head[1:].decode("utf-8"))  # accepts NaN/Infinity as rapidjson writes them
        return Reply(request_id=int(obj["request_id"]), op=str(obj.get("op", "")),
                     ok=bool(obj["ok"]), body=obj.get("body") or {}, error=obj.get("error") or {},
                     frames=list(parts[1:]))
    except (ValueError, KeyError, TypeError) as e:
        raise SpindleError(BAD_REPLY, f"reply header: {e}") from e


def read_tensor(ref: dict, frames: list[bytes], name: str) -> np.ndarray:
    """The array a TensorRef names (a read-only view of the frame, shaped and typed)."""
    try:
        index, dtype = int(ref["frame"]), str(ref["dtype"])
        shape = tuple(int(n) for n in ref["shape"])
    except (KeyError, TypeError, ValueError) as e:
        raise SpindleError(BAD_REPLY, f"{name}: malformed tensor reference {ref!r}") from e
    if dtype not in WIRE_DTYPES:
        raise SpindleError(BAD_REPLY, f"{name}: unknown dtype {dtype!r}")
    if not 0 <= index < len(frames):
        raise SpindleError(BAD_REPLY, f"{name}: frame {index} of {len(frames)}")
    np_dtype = WIRE_DTYPES[dtype]
    count = math.prod(shape)
    if len(frames[index]) != count * np_dtype.itemsize:
        raise SpindleError(BAD_REPLY, f"{name}: frame {index} holds {len(frames[index])} bytes, "
                                      f"{dtype}{list(shape)} needs {count * np_dtype.itemsize}")
    return np.frombuffer(frames[index], dtype=np_dtype).reshape(shape)


def named_values(items: list[dict]) -> dict[str, float]:
    """[{"name", "value"}] (NamedValue list) -> dict."""
    return {str(i["name"]): float(i["value"]) for i in items}

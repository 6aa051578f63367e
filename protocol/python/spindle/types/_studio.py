"""Types of the Studio's ops (PROTOCOL.md "Reward plugins and datasets", "Streaming sample",
"Events")."""

from __future__ import annotations

from dataclasses import dataclass, field

from ._rewards import RewardRow
from ._runs import RunStatus
from ._server import ServerStatus


@dataclass
class RewardPlugin:
    """One reward plugin the daemon's reward host can load (a spec term's "plugin")."""
    name: str = ""
    description: str = ""
    version: str = ""             # the plugin's own version ("" when it declares none)
    abi_version: int = 0
    config_schema_json: str = ""  # JSON Schema (subset) of the term's config object
    path: str = ""                # the shared object on the daemon's machine


@dataclass
class DatasetInfo:
    """A built-in prompt dataset of the daemon (a GRPO run config's dataset "name")."""
    name: str = ""
    description: str = ""
    available: bool = False       # its files exist on the daemon's machine
    rows: int = 0                 # train rows
    heldout_rows: int = 0
    examples: list[RewardRow] = field(default_factory=list)  # first train rows
    error: str = ""               # why it is unavailable


@dataclass
class SampleDelta:
    """New tokens of one sequence (index among num_samples) of a sample_stream. pieces[i] is
    the text of tokens[i] as the base's tokenizer decodes it after the token before it (a stop
    token's is "", all are "" when the base has no tokenizer; a piece that ends inside a UTF-8
    character shows U+FFFD per byte, as the SDK reads the JSON encoding). A sequence's pieces
    concatenate to its final text, cut where a stop string starts."""
    sequence: int = 0
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    pieces: list[str] = field(default_factory=list)


@dataclass
class Event:
    """One event of a subscription: topic "metrics" (run set) or "residency" (status set, with
    only the caller's placements)."""
    topic: str = ""
    run: RunStatus | None = None
    status: ServerStatus | None = None

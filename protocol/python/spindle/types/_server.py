"""Server description types (capabilities, status)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class BaseInfo:
    id: str = ""
    arch: str = ""
    n_layers: int = 0
    dim: int = 0
    vocab_size: int = 0
    max_seq_len: int = 0
    bos_token: int = -1
    eos_token: int = -1


@dataclass
class LimitsInfo:
    max_frame_bytes: int = 0
    max_frames: int = 0
    max_batch: int = 0
    max_tokens_per_request: int = 0
    max_num_samples: int = 0
    max_sample_tokens: int = 0
    max_rank: int = 0
    max_queue: int = 0
    max_sessions: int = 0


@dataclass
class SupportedModel:
    """Tinker's SupportedModel: a served base's id and context length."""
    model_name: str | None = None
    max_context_length: int | None = None


@dataclass
class ServerCapabilities:
    bases: list[BaseInfo] = field(default_factory=list)
    limits: LimitsInfo = field(default_factory=LimitsInfo)
    loss_fns: list[str] = field(default_factory=list)
    encodings: list[str] = field(default_factory=list)

    @property
    def supported_models(self) -> list[SupportedModel]:
        """Tinker's name for the base models served."""
        return [SupportedModel(model_name=b.id, max_context_length=b.max_seq_len or None)
                for b in self.bases]


GetServerCapabilitiesResponse = ServerCapabilities


@dataclass
class PlacementInfo:
    revision_id: str = ""
    tier: str = ""  # "device" | "host" | "loading" | "cold"
    slot: int = -1
    in_use: int = 0


@dataclass
class BaseStatus:
    """One served base in ServerStatus.bases (its device memory, slots and load)."""
    id: str = ""
    device: str = ""
    dtype: str = ""
    base_bytes: int = 0
    kv_bytes: int = 0
    serving_pool_bytes: int = 0
    training_pool_bytes: int = 0
    device_slots: int = 0
    device_slots_used: int = 0
    running_sequences: int = 0
    training_sessions: int = 0
    queue_depth: int = 0


@dataclass
class ServerStatus:
    server_version: str = ""
    uptime_s: float = 0.0
    queue_depth: int = 0
    parked: int = 0
    running_sequences: int = 0
    training_sessions: int = 0
    requests_served: int = 0
    requests_failed: int = 0
    tokens_per_s: float = 0.0
    device_slots: int = 0
    device_slots_used: int = 0
    host_cache_bytes: int = 0
    host_cache_capacity: int = 0
    loads_queued: int = 0
    loads_running: int = 0
    device_hit_rate: float = 0.0
    host_hit_rate: float = 0.0
    mean_load_wait_ms: float = 0.0
    placements: list[PlacementInfo] = field(default_factory=list)
    # Where the engine runs (spindled --device) and the device memory it holds.
    device: str = ""
    device_name: str = ""
    dtype: str = ""
    base_bytes: int = 0
    kv_bytes: int = 0
    serving_pool_bytes: int = 0
    training_pool_bytes: int = 0
    device_free_bytes: int = 0
    device_total_bytes: int = 0
    # Every served base (the fields above sum over them; device/dtype are the first's).
    bases: list[BaseStatus] = field(default_factory=list)
    # Residency counters since start: sample requests parked for a cold adapter or because
    # every serving slot was in use, and adapters evicted from a slot.
    cold_parks: int = 0
    busy_parks: int = 0
    slot_evictions: int = 0


@dataclass
class HandshakeInfo:
    protocol_version: int = 0
    server_version: str = ""
    tenant: str = ""

"""Catalog types: policies, revisions, lineage, PEFT export."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class PolicyInfo:
    address: str = ""  # spindle://tenant/policy
    tenant: str = ""
    name: str = ""
    base_id: str = ""
    rank: int = 0
    alpha: float = 0.0
    targets: list[str] = field(default_factory=list)
    head: str = ""  # revision id; "" before the first save
    forked_from: str = ""
    tags: list[str] = field(default_factory=list)
    description: str = ""
    created_ms: int = 0
    updated_ms: int = 0
    user_metadata_json: str = ""  # the creating client's user_metadata ("" or a JSON object)


@dataclass
class RevisionInfo:
    id: str = ""
    policy: str = ""
    parent: str = ""  # "" for a first revision
    step: int = 0
    blob: str = ""
    bytes: int = 0
    has_state: bool = False  # optimizer state saved with it (save_state)
    metrics_json: str = ""
    created_ms: int = 0
    expires_ms: int = 0  # ephemeral (saved with ttl_seconds): Unix ms of expiry; 0 = durable
    expired: bool = False  # past expiry and collected: weights gone, row kept for lineage


@dataclass
class PolicyDetails:
    """catalog_show / fork / tag / rollback / import_peft: the policy, the revision the
    address resolved to (id "" if none) and its newest revisions (newest first, at most 20)."""
    policy: PolicyInfo = field(default_factory=PolicyInfo)
    revision: RevisionInfo = field(default_factory=RevisionInfo)
    recent: list[RevisionInfo] = field(default_factory=list)

    @property
    def address(self) -> str:
        """The resolved revision's address (the policy's when it has no revision)."""
        if self.revision.id:
            return f"{self.policy.address}@{self.revision.id}"
        return self.policy.address


@dataclass
class PolicyListResponse:
    policies: list[PolicyInfo] = field(default_factory=list)
    next_cursor: str = ""  # "" = last page


@dataclass
class LineageEntry:
    revision: RevisionInfo
    depth: int = 0


@dataclass
class LineageResponse:
    revision: RevisionInfo = field(default_factory=RevisionInfo)
    ancestors: list[LineageEntry] = field(default_factory=list)
    descendants: list[LineageEntry] = field(default_factory=list)
    ancestors_truncated: bool = False
    descendants_truncated: bool = False


@dataclass
class ExportPeftResponse:
    revision_id: str
    directory: str  # holds adapter_config.json and adapter_model.safetensors

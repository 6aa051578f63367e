"""Stand-in for the cookbook's checkpoint_utils: checkpoints.jsonl records, save_checkpoint
(save_state / save_weights_for_sampler with ttl_seconds) and get_last_checkpoint."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import spindle as tinker

CHECKPOINTS_BASE_NAME = "checkpoints.jsonl"
logger = logging.getLogger(__name__)


@dataclass
class CheckpointRecord:
    name: str
    batch: int | None = None
    epoch: int | None = None
    final: bool | None = None
    state_path: str | None = None
    sampler_path: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.name}
        for key in ("batch", "epoch", "final", "state_path", "sampler_path"):
            if getattr(self, key) is not None:
                d[key] = getattr(self, key)
        d.update(self.extra)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "CheckpointRecord":
        known = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        return cls(**{k: d.get(k) for k in known if k != "name"}, name=d["name"],
                   extra={k: v for k, v in d.items() if k not in known})

    def has(self, key: str) -> bool:
        if hasattr(self, key) and key != "extra":
            return getattr(self, key) is not None
        return key in self.extra


def load_checkpoints_file(log_dir: str) -> list[CheckpointRecord]:
    path = Path(log_dir) / CHECKPOINTS_BASE_NAME
    if not path.exists():
        return []
    return [CheckpointRecord.from_dict(json.loads(line))
            for line in path.read_text().splitlines() if line.strip()]


def get_last_checkpoint(log_dir: str, required_key: str = "state_path") -> CheckpointRecord | None:
    checkpoints = [c for c in load_checkpoints_file(log_dir) if c.has(required_key)]
    return checkpoints[-1] if checkpoints else None


async def save_checkpoint_async(training_client: tinker.TrainingClient, name: str, log_path: str,
                                loop_state: dict[str, Any],
                                kind: Literal["state", "sampler", "both"] = "state",
                                ttl_seconds: int | None = None) -> dict[str, str]:
    futures = {}
    if kind in ["state", "both"]:
        futures["state"] = await training_client.save_state_async(name, ttl_seconds=ttl_seconds)
    if kind in ["sampler", "both"]:
        futures["sampler"] = await training_client.save_weights_for_sampler_async(
            name, ttl_seconds=ttl_seconds)
    results = {k: await v.result_async() for k, v in futures.items()}
    paths = {k + "_path": v.path for k, v in results.items()}
    logger.info(f"Saved checkpoints: {paths}")
    record = CheckpointRecord.from_dict({"name": name, **loop_state, **paths})
    with open(Path(log_path) / CHECKPOINTS_BASE_NAME, "a") as f:
        f.write(json.dumps(record.to_dict()) + "\n")
    return paths


def save_checkpoint(training_client: tinker.TrainingClient, name: str, log_path: str,
                    loop_state: dict[str, Any], kind: Literal["state", "sampler", "both"] = "state",
                    ttl_seconds: int | None = None) -> dict[str, str]:
    return asyncio.run(save_checkpoint_async(training_client, name=name, log_path=log_path,
                                             kind=kind, loop_state=loop_state,
                                             ttl_seconds=ttl_seconds))

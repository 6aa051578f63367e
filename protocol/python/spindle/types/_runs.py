"""GRPO run types (ops run_start/list/status/stop/resume; PROTOCOL.md "GRPO runs")."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


@dataclass
class RunInfo:
    id: str = ""
    tenant: str = ""
    status: str = ""  # queued | running | stopped | failed | done
    error: str = ""
    step: int = 0  # last finished step
    steps: int = 0
    policies: list[str] = field(default_factory=list)  # addresses
    config_json: str = ""
    created_ms: int = 0
    updated_ms: int = 0

    @property
    def finished(self) -> bool:
        """No longer running (done, stopped or failed)."""
        return self.status not in ("queued", "running")


@dataclass
class RunMetric:
    step: int = 0
    policy: str = ""  # the policy's name
    metrics: dict[str, Any] = field(default_factory=dict)  # reward_mean, loss, kl, ...


@dataclass
class RunStartResponse:
    run_id: str = ""
    policies: list[str] = field(default_factory=list)


@dataclass
class RunListResponse:
    runs: list[RunInfo] = field(default_factory=list)  # newest first
    next_cursor: str = ""  # "" = last page


@dataclass
class RunStatus:
    """run_status / run_stop / run_resume, and the body of a "metrics" PUB event."""
    run: RunInfo = field(default_factory=RunInfo)
    metrics: list[RunMetric] = field(default_factory=list)


def run_info(body: dict) -> RunInfo:
    return RunInfo(id=str(body.get("id", "")), tenant=str(body.get("tenant", "")),
                   status=str(body.get("status", "")), error=str(body.get("error", "")),
                   step=int(body.get("step", 0)), steps=int(body.get("steps", 0)),
                   policies=[str(p) for p in body.get("policies", [])],
                   config_json=str(body.get("config_json", "")),
                   created_ms=int(body.get("created_ms", 0)),
                   updated_ms=int(body.get("updated_ms", 0)))


def run_status(body: dict) -> RunStatus:
    metrics = []
    for m in body.get("metrics", []):
        try:
            values = json.loads(m.get("metrics_json", "") or "{}")
        except ValueError:
            values = {"raw": m.get("metrics_json", "")}
        metrics.append(RunMetric(step=int(m.get("step", 0)), policy=str(m.get("policy", "")),
                                 metrics=values))
    return RunStatus(run=run_info(body.get("run", {})), metrics=metrics)

"""Stand-in for the cookbook's ml_log: metrics go to <log_dir>/metrics.jsonl."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


class Logger:
    def __init__(self, log_dir: str) -> None:
        self.path = Path(log_dir) / "metrics.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def log_metrics(self, metrics: dict[str, Any], step: int | None = None) -> None:
        with open(self.path, "a") as f:
            f.write(json.dumps({"step": step, **{k: float(v) for k, v in metrics.items()}}) + "\n")

    def close(self) -> None:
        pass


def setup_logging(log_dir: str, wandb_project=None, wandb_name=None, config=None,
                  do_configure_logging_module: bool = False) -> Logger:
    return Logger(log_dir)

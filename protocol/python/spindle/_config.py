"""Where a local daemon is: the same data-dir rule as `spindle` and `spindled`
($SPINDLE_DATA_DIR, else $XDG_DATA_HOME/spindle, else ~/.local/share/spindle)."""

from __future__ import annotations

import os
from pathlib import Path

from .errors import UNAUTHENTICATED, SpindleError


def data_dir() -> Path:
    if os.environ.get("SPINDLE_DATA_DIR"):
        return Path(os.environ["SPINDLE_DATA_DIR"])
    if os.environ.get("XDG_DATA_HOME"):
        return Path(os.environ["XDG_DATA_HOME"]) / "spindle"
    return Path.home() / ".local" / "share" / "spindle"


def default_endpoint() -> str:
    """$SPINDLE_ENDPOINT, else the local daemon's IPC socket."""
    return os.environ.get("SPINDLE_ENDPOINT") or f"ipc://{data_dir() / 'spindled.sock'}"


def default_token() -> str:
    """$SPINDLE_TOKEN, else <data_dir>/token (written by spindled on first start)."""
    if os.environ.get("SPINDLE_TOKEN"):
        return os.environ["SPINDLE_TOKEN"]
    path = data_dir() / "token"
    try:
        return path.read_text().strip()
    except OSError as e:
        raise SpindleError(UNAUTHENTICATED,
                           f"no token: set SPINDLE_TOKEN or start spindled so it writes {path} ({e})")

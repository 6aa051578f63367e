"""Where a local daemon is: the same data-dir rule as `spindle` and `spindled`
($SPINDLE_DATA_DIR, else $XDG_DATA_HOME/spindle, else ~/.local/share/spindle), and, as the CLI
does (protocol::client_data_dir), the system daemon's /var/lib/spindle when the user runs no
daemon of their own and the system one is up."""

from __future__ import annotations

import os
from pathlib import Path

from .errors import UNAUTHENTICATED, SpindleError


SYSTEM_DATA_DIR = Path("/var/lib/spindle")


def data_dir() -> Path:
    if os.environ.get("SPINDLE_DATA_DIR"):
        return Path(os.environ["SPINDLE_DATA_DIR"])
    if os.environ.get("XDG_DATA_HOME"):
        mine = Path(os.environ["XDG_DATA_HOME"]) / "spindle"
    else:
        mine = Path.home() / ".local" / "share" / "spindle"
    if not (mine / "spindled.sock").exists() and (SYSTEM_DATA_DIR / "spindled.sock").exists():
        return SYSTEM_DATA_DIR
    return mine


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

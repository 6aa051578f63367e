"""Fixtures: the SDK on sys.path, and a real spindled serving stories260K on a temp data dir.

Environment (set by the ctest registration in tests/CMakeLists.txt):
  SPINDLED_BIN        path of the built spindled (tests needing it skip when unset/absent)
  SPINDLE_SDK_PATH    folder to import `spindle` from (default: protocol/python of this tree)
  SPINDLE_SHARED_DIR  folder holding models/stories260K (else SPINDLE_SHARED_DIR_DEFAULT, else
                      ../shared beside the source)
One daemon serves the whole session; tests use distinct policy names."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

SOURCE_DIR = Path(__file__).resolve().parents[2]
# SPINDLE_SDK_PATH: import the SDK from there instead (the packaging test points it at an
# unpacked python3-spindle, so the installed package is what runs).
sys.path.insert(0, os.environ.get("SPINDLE_SDK_PATH") or str(SOURCE_DIR / "protocol" / "python"))

import spindle  # noqa: E402

READY_TIMEOUT_S = 120.0


def shared_dir() -> Path:
    """$SPINDLE_SHARED_DIR, else the build's default (ctest passes SPINDLE_SHARED_DIR_DEFAULT),
    else the folder beside the source tree."""
    return Path(os.environ.get("SPINDLE_SHARED_DIR") or os.environ.get("SPINDLE_SHARED_DIR_DEFAULT")
                or SOURCE_DIR.parent / "shared")


class Daemon:
    """A spindled child process; stdout/stderr are kept (and echoed on failure)."""

    def __init__(self, binary: Path, model: Path, extra_args: list[str] | None = None,
                 data_dir: Path | None = None) -> None:
        # Short path: the IPC socket path must fit in sockaddr_un (108 bytes). A given data_dir
        # (a restart, or files written before the start) is used as it is.
        self.data_dir = data_dir or Path(tempfile.mkdtemp(prefix="spdpy"))
        self.log: list[str] = []
        self._ready = threading.Event()
        args = [str(binary), "--data-dir", str(self.data_dir), "--model", str(model),
                *(extra_args or [])]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, bufsize=1)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        if not self._ready.wait(READY_TIMEOUT_S) or self.proc.poll() is not None:
            self.stop()
            raise RuntimeError("spindled did not become ready:\n" + "".join(self.log[-40:]))

    def _read(self) -> None:
        for line in self.proc.stdout:  # type: ignore[union-attr]
            self.log.append(line)
            if "spindled ready" in line:
                self._ready.set()
        self._ready.set()  # EOF: the process ended

    @property
    def endpoint(self) -> str:
        return f"ipc://{self.data_dir / 'spindled.sock'}"

    @property
    def token(self) -> str:
        return (self.data_dir / "token").read_text().strip()

    def stop(self, remove: bool = True) -> int:
        """SIGTERM (drain), then the exit code; remove=False keeps the data dir for a restart."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(timeout=5)
        if remove:
            shutil.rmtree(self.data_dir, ignore_errors=True)
        return self.proc.returncode


def spindled_and_model() -> tuple[Path, Path]:
    """The built spindled ($SPINDLED_BIN) and the stories260K model, or skip naming what is
    missing."""
    binary = os.environ.get("SPINDLED_BIN", "")
    if not binary or not Path(binary).is_file():
        pytest.skip(f"spindled binary not found (SPINDLED_BIN={binary!r}); build target spindled")
    model = shared_dir() / "models" / "stories260K" / "stories260K.bin"
    if not model.is_file():
        pytest.skip(f"fixture missing: {model} (set SPINDLE_SHARED_DIR to the folder holding models/)")
    return Path(binary).resolve(), model


@pytest.fixture(scope="session")
def daemon():
    binary, model = spindled_and_model()
    d = Daemon(binary, model)
    yield d
    code = d.stop()
    assert code == 0, "spindled exited with %s on SIGTERM:\n%s" % (code, "".join(d.log[-40:]))


@pytest.fixture(scope="session")
def service(daemon):
    client = spindle.ServiceClient(daemon.endpoint, token=daemon.token)
    yield client
    client.close()


@pytest.fixture(scope="session")
def base_model(service) -> str:
    return service.get_server_capabilities().bases[0].id

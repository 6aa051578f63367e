"""packaging/slurm/spindle.sbatch on a real single-node Slurm cluster that this test starts itself
(munged, slurmctld and slurmd in a temp dir, on loopback ports): the job brings up a coordinator
and two CPU workers on stories260K, the SDK trains a LoRA policy through it (SFT: loss goes down,
save, sample), and `scancel` stops every daemon cleanly (exit 0, the coordinator drained).

Skips when slurm-wlm/munge are not installed or one of their daemons cannot start here (the
reason names the daemon and shows its log tail), and, as the other tests, without spindled or
the stories260K fixture."""

from __future__ import annotations

import getpass
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

import spindle
from spindle import types

from conftest import SOURCE_DIR, spindled_and_model
from helpers import BOS, mean_token_loss, sft_datum

SCRIPT = SOURCE_DIR / "packaging" / "slurm" / "spindle.sbatch"
DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "squeue", "scancel", "sinfo", "scontrol", "srun")


def find_bin(name: str) -> str | None:
    """On PATH, else in the sbin folders (not on a non-root user's PATH on Debian)."""
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin:/usr/local/sbin")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tail(path: Path, lines: int = 15) -> str:
    try:
        return "".join(path.read_text(errors="replace").splitlines(keepends=True)[-lines:])
    except OSError as e:
        return f"({path}: {e})"


def wait_for(predicate, timeout: float, what: str, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


class SlurmCluster:
    """munged + slurmctld + slurmd as child processes, all state under one temp dir."""

    def __init__(self) -> None:
        # Short and world-traversable: munged wants execute permission for all on its socket's
        # folders, and the job's IPC socket paths must fit in sockaddr_un.
        self.root = Path(tempfile.mkdtemp(prefix="spdslurm", dir="/tmp"))
        self.root.chmod(0o755)
        self.host = socket.gethostname().split(".")[0]
        self.procs: dict[str, subprocess.Popen] = {}
        self.logs: dict[str, Path] = {}
        self.conf = self.root / "slurm.conf"
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith(("SLURM_", "SBATCH_", "SRUN_", "SALLOC_"))}
        self.env["SLURM_CONF"] = str(self.conf)

    # -- start ---------------------------------------------------------------------------------
    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen:
        out = self.root / "log" / f"{name}.out"
        self.logs[name] = out
        with out.open("w") as f:
            proc = subprocess.Popen(args, stdout=f, stderr=subprocess.STDOUT, env=self.env,
                                    start_new_session=True)
        self.procs[name] = proc
        return proc

    def _skip(self, daemon: str, why: str, log: Path | None = None) -> None:
        log = log or self.logs.get(daemon)
        text = tail(log) if log else ""
        pytest.skip(f"{daemon} cannot start here: {why}\n--- {log} ---\n{text}")

    def start(self) -> None:
        self.bin = {b: find_bin(b) for b in DAEMONS + CLIENTS + ("munge", "unmunge")}
        missing = [b for b, path in self.bin.items() if not path]
        if missing:
            pytest.skip(f"slurm-wlm/munge not installed (missing {', '.join(missing)}; "
                        f"packaging/install-deps.sh installs them)")
        (self.root / "log").mkdir()
        self._start_munge()
        self._start_slurm()

    def _start_munge(self) -> None:
        mdir = self.root / "munge"       # socket, pid, seed, log: 0755 as munged requires
        kdir = self.root / "munge-key"   # the key: private
        mdir.mkdir()
        mdir.chmod(0o755)
        kdir.mkdir()
        kdir.chmod(0o700)
        key = kdir / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        self.munge_socket = mdir / "munge.socket"
        self._spawn("munged", [self.bin["munged"], "--foreground", "--force", f"--key-file={key}",
                               f"--socket={self.munge_socket}", f"--pid-file={mdir / 'munged.pid'}",
                               f"--log-file={mdir / 'munged.log'}",
                               f"--seed-file={mdir / 'munged.seed'}"])
        try:
            wait_for(lambda: self.munge_socket.exists() or self.procs["munged"].poll() is not None,
                     10, "munged's socket")
        except AssertionError:
            pass
        if not self.munge_socket.exists() or self.procs["munged"].poll() is not None:
            self._skip("munged", "no socket", self.logs["munged"])
        cred = subprocess.run([self.bin["munge"], "-n", "-S", str(self.munge_socket)], capture_output=True)
        check = subprocess.run([self.bin["unmunge"], "-S", str(self.munge_socket)], input=cred.stdout,
                               capture_output=True)
        if cred.returncode != 0 or check.returncode != 0:
            self._skip("munged", f"munge/unmunge failed: {cred.stderr!r} {check.stderr!r}")

    def _start_slurm(self) -> None:
        r = self.root
        for d in ("state", "spool"):
            (r / d).mkdir()
        (r / "plugstack.conf").write_text("")  # no site SPANK plugins
        mem_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1 << 20)
        user = getpass.getuser()
        # config_overrides: the node is what this file says (4 CPUs even on a 1-CPU runner), so
        # the job's two worker tasks fit.
        self.conf.write_text(f"""\
ClusterName=spindletest
SlurmctldHost={self.host}(127.0.0.1)
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
SlurmUser={user}
SlurmdUser={user}
AuthType=auth/munge
AuthInfo=socket={self.munge_socket}
CredType=cred/munge
StateSaveLocation={r / 'state'}
SlurmdSpoolDir={r / 'spool'}
SlurmctldPidFile={r / 'slurmctld.pid'}
SlurmdPidFile={r / 'slurmd.pid'}
SlurmctldLogFile={r / 'log' / 'slurmctld.log'}
SlurmdLogFile={r / 'log' / 'slurmd.log'}
PlugStackConfig={r / 'plugstack.conf'}
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/builtin
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
KillWait=30
MinJobAge=300
NodeName={self.host} NodeAddr=127.0.0.1 CPUs={max(4, os.cpu_count() or 1)} RealMemory={max(256, min(4096, mem_mb // 2))} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
""")
        self._spawn("slurmctld", [self.bin["slurmctld"], "-D", "-f", str(self.conf)])
        try:
            wait_for(lambda: self._run(["sinfo", "-h"]).returncode == 0
                     or self.procs["slurmctld"].poll() is not None, 20, "slurmctld")
        except AssertionError:
            pass
        if self.procs["slurmctld"].poll() is not None or self._run(["sinfo", "-h"]).returncode:
            self._skip("slurmctld", "it exited or does not answer sinfo")
        self._spawn("slurmd", [self.bin["slurmd"], "-D", "-f", str(self.conf), "-N", self.host])

        def idle():
            if self.procs["slurmd"].poll() is not None:
                return "exited"
            state = self._run(["sinfo", "-h", "-n", self.host, "-o", "%t"]).stdout.strip()
            return state if state.startswith("idle") else None
        try:
            state = wait_for(idle, 30, "the node to be idle")
        except AssertionError:
            state = None
        if state != "idle":
            self._skip("slurmd", f"node {self.host} not idle "
                       f"({self._run(['sinfo', '-h', '-N', '-l']).stdout.strip()!r})")

    # -- use -----------------------------------------------------------------------------------
    def _run(self, args: list[str], **kw) -> subprocess.CompletedProcess:
        return subprocess.run(args, capture_output=True, text=True, env=kw.pop("env", self.env),
                              timeout=kw.pop("timeout", 30), **kw)

    def job_state(self, job: str) -> str | None:
        """The job's state in squeue (None once it left the queue)."""
        out = self._run(["squeue", "-h", "-j", job, "-o", "%T"])
        return out.stdout.strip() or None if out.returncode == 0 else None

    def scontrol_job(self, job: str) -> dict[str, str]:
        out = self._run(["scontrol", "show", "job", "-o", job]).stdout
        return dict(f.split("=", 1) for f in out.split() if "=" in f)

    # -- stop ----------------------------------------------------------------------------------
    def _ours(self) -> list[int]:
        """Processes started under this cluster (their environment names our slurm.conf or
        their command line our temp dir): slurmstepd, job shells, srun, spindled."""
        live = {q.pid for q in self.procs.values() if q.poll() is None}
        mine, mark = [], str(self.root).encode()
        for p in Path("/proc").iterdir():
            if not p.name.isdigit() or int(p.name) == os.getpid():
                continue
            try:
                stat = (p / "stat").read_text().rsplit(")", 1)[1].split()
                blob = (p / "cmdline").read_bytes() + (p / "environ").read_bytes()
            except (OSError, IndexError):
                continue
            # Not the daemons still to be stopped nor their own children (slurmctld's
            # slurmscriptd), and not zombies (gone already, their parent reaps them).
            if stat[0] == "Z" or int(p.name) in live or int(stat[1]) in live:
                continue
            if mark in blob:
                mine.append(int(p.name))
        return mine

    def stop(self) -> None:
        if "slurmctld" in self.procs and self.procs["slurmctld"].poll() is None:
            self._run(["scancel", "-u", getpass.getuser()])
            try:
                wait_for(lambda: not self._run(["squeue", "-h"]).stdout.strip(), 40,
                         "the queue to empty")
            except (AssertionError, subprocess.TimeoutExpired):
                pass
        for name in ("slurmd", "slurmctld", "munged"):
            proc = self.procs.get(name)
            if proc is None or proc.poll() is not None:
                continue
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if name == "slurmd":
                self._kill_ours()  # slurmstepd and whatever a job left, before its controller goes
        self._kill_ours()
        shutil.rmtree(self.root, ignore_errors=True)

    def _kill_ours(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            pids = self._ours()
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and set(pids) & set(self._ours()):
                time.sleep(0.1)


@pytest.fixture(scope="module")
def spindle_bits():
    return spindled_and_model()


@pytest.fixture(scope="module")
def slurm(spindle_bits):
    cluster = SlurmCluster()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def submit(slurm: SlurmCluster, spindle_bits, name: str, transport: str) -> tuple[str, Path]:
    binary, model = spindle_bits
    submit_dir = slurm.root / name
    submit_dir.mkdir()
    env = dict(slurm.env, SPINDLE_MODEL=str(model), SPINDLED=str(binary),
               SPINDLE_WORKERS_PER_NODE="2", SPINDLE_CLUSTER_TRANSPORT=transport,
               SPINDLE_CLUSTER_PORT=str(free_port()), SPINDLE_WORKER_DEVICE="cpu",
               SPINDLE_COORDINATOR_ARGS="--worker-timeout-s 3",
               SPINDLE_WORKER_ARGS="--heartbeat-s 0.2")
    env.pop("SPINDLE_DATA_DIR", None)
    out = slurm._run(["sbatch", "--parsable", "--nodes=1", "--ntasks=2", f"--job-name={name}",
                      f"--chdir={submit_dir}", f"--output={submit_dir}/slurm-%j.out",
                      str(SCRIPT)], env=env, cwd=submit_dir)  # SLURM_SUBMIT_DIR: the job dir's parent
    assert out.returncode == 0, out.stderr
    job = out.stdout.strip().split(";")[0]
    return job, submit_dir / f"spindle-{job}"


def wait_ready(slurm: SlurmCluster, job: str, job_dir: Path) -> spindle.ServiceClient:
    def ready():
        if (job_dir / "endpoint").exists():
            return True
        assert slurm.job_state(job) in ("PENDING", "RUNNING", "CONFIGURING"), (
            f"job {job} ended before it was ready:\n" + tail(job_dir.parent / f"slurm-{job}.out", 40)
            + tail(job_dir / "logs" / "coordinator.log"))
        return False
    try:
        wait_for(ready, 60, f"job {job}'s endpoint file")
    except AssertionError as e:
        raise AssertionError(f"{e}: {slurm._run(['squeue', '-h', '-o', '%i %T %r']).stdout}\n"
                             + tail(job_dir.parent / f"slurm-{job}.out", 40)) from None
    env = dict(line.split("=", 1) for line in (job_dir / "spindle.env").read_text().splitlines())
    endpoint = (job_dir / "endpoint").read_text().strip()
    assert env["SPINDLE_ENDPOINT"] == endpoint
    token = Path(env["SPINDLE_TOKEN_FILE"]).read_text().strip()
    client = spindle.ServiceClient(endpoint, token=token)
    try:
        wait_for(lambda: sum(w["alive"] for w in client.cluster_status()["workers"]) == 2, 30,
                 "two workers to join")
    except AssertionError:
        client.close()
        raise AssertionError("workers did not join:\n" + "".join(
            f"--- {f.name}\n{tail(f)}" for f in sorted((job_dir / "logs").iterdir())))
    return client


def stop_and_check(slurm: SlurmCluster, job: str, job_dir: Path, scancel_args: list[str]) -> dict:
    out = slurm._run(["scancel", *scancel_args, job])
    assert out.returncode == 0, out.stderr
    wait_for(lambda: slurm.job_state(job) is None, 45, f"job {job} to leave the queue")
    info = slurm.scontrol_job(job)
    report = tail(job_dir.parent / f"slurm-{job}.out", 40)
    assert (job_dir / "exit_codes").exists(), f"no exit_codes ({info.get('JobState')}):\n{report}"
    codes = dict(line.split() for line in (job_dir / "exit_codes").read_text().splitlines())
    assert codes == {"coordinator": "0", "worker-" + slurm.host + "-0": "0",
                     "worker-" + slurm.host + "-1": "0"}, f"{codes}\n{report}"
    coord_log = (job_dir / "logs" / "coordinator.log").read_text()
    assert "stopping: refusing new requests" in coord_log and "stopped:" in coord_log, coord_log[-2000:]
    for w in (job_dir / "logs").glob("worker-*.log"):
        assert "stopped:" in w.read_text(), tail(w)
    assert not (job_dir / "endpoint").exists()  # removed when the cluster is gone
    return info


def test_sbatch_cluster_trains_and_scancel_stops_it(slurm, spindle_bits):
    """CURVE over loopback TCP (the multi-node path: keys made by the script and allow-listed),
    SFT through a worker, then a plain `scancel JOBID`."""
    job, job_dir = submit(slurm, spindle_bits, "sft", "tcp")
    client = wait_ready(slurm, job, job_dir)
    try:
        status = client.cluster_status()
        assert status["role"] == "coordinator"
        assert status["cluster_endpoint"].startswith("tcp://0.0.0.0:")
        names = sorted(w["name"] for w in status["workers"])
        assert names == [f"{slurm.host}/cpu0", f"{slurm.host}/cpu1"]
        assert all(w["device"].startswith("cpu") for w in status["workers"])
        coord_log = (job_dir / "logs" / "coordinator.log").read_text()
        assert "refused CURVE client" not in coord_log  # the workers' keys were allow-listed first

        base = client.get_server_capabilities().bases[0].id
        prompt = [BOS] + list(range(20, 32))
        completion = list(range(40, 52))
        data = [sft_datum(prompt, completion)]
        training = client.create_lora_training_client(base, rank=8, seed=3, policy="slurm-sft")
        losses = []
        for _ in range(8):
            fb = training.forward_backward(data, "cross_entropy")
            training.optim_step(types.AdamParams(learning_rate=1e-2)).result()
            losses.append(mean_token_loss(fb.result()))
        print(f"slurm sft: loss {losses[0]:.3f} -> {losses[-1]:.3f} nats/token")
        assert np.isfinite(losses).all() and losses[-1] < losses[0] - 0.05, losses
        forwarded = {w["name"]: w["forwarded"] for w in client.cluster_status()["workers"]}
        assert sum(1 for n in forwarded.values() if n > 0) == 1, forwarded  # pinned to one worker

        saved = training.save_weights_for_sampler("slurm-sft-w8").result()  # durable
        assert saved.path.startswith("spindle://")
        sampler = client.create_sampling_client(model_path=saved.path)
        greedy = types.SamplingParams(max_tokens=6, temperature=0.0, seed=0)
        out = sampler.sample(types.ModelInput.from_ints(prompt), 2, greedy).result()
        assert [len(s.tokens) for s in out.sequences] == [6, 6]
        assert out.sequences[0].tokens == out.sequences[1].tokens  # greedy
    finally:
        client.close()
    info = stop_and_check(slurm, job, job_dir, [])
    assert info.get("JobState") == "CANCELLED", info  # plain scancel: TERM to all, then done


def test_single_node_ipc_and_batch_signal_completes(slurm, spindle_bits):
    """The one-node default (IPC cluster socket), stopped the graceful way the script documents
    (`scancel -b -s TERM`: the script stops workers, then the coordinator): COMPLETED, exit 0."""
    job, job_dir = submit(slurm, spindle_bits, "ipc", "auto")
    client = wait_ready(slurm, job, job_dir)
    try:
        status = client.cluster_status()
        assert status["cluster_endpoint"] == f"ipc://{job_dir}/coordinator/spindled-cluster.sock"
        base = client.get_server_capabilities().bases[0].id
        out = client.create_sampling_client(base_model=base).sample(
            types.ModelInput.from_ints([BOS]), 2, types.SamplingParams(max_tokens=4, seed=1)).result()
        assert [len(s.tokens) for s in out.sequences] == [4, 4]
    finally:
        client.close()
    info = stop_and_check(slurm, job, job_dir, ["--batch", "--signal=TERM"])
    assert info.get("JobState") == "COMPLETED" and info.get("ExitCode") == "0:0", info

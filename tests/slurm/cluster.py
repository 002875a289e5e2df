"""A real, private, single-host SLURM cluster for tests: munged + slurmctld + slurmd.

``slurm_cluster(workdir)`` starts the three daemons as child processes in the foreground with
everything they write (munge key and socket, slurm.conf, state, spool, logs, pid files) in a
private directory under ``workdir``, on free TCP ports, so two test runs on one machine (or a
system SLURM) do not clash. It yields a :class:`SlurmCluster` whose ``env`` (``SLURM_CONF``
pointing at the private slurm.conf, no inherited ``SLURM_*``) must be used for every client
command; ``run()`` does that. On exit it cancels this cluster's jobs and stops exactly the
processes it started (their process groups), never anything found by name.

Install the daemons with ``scripts/install_system_packages.sh`` (Debian: slurmctld slurmd slurm-client munge);
without them ``slurm_cluster`` raises :class:`SlurmUnavailable` and the tests skip.

Signals and requeue on this one-node setup (Slurm 22.05, measured):

* ``scancel --signal=USR1 JOB`` signals every process of every *step* (``srun`` tasks) at once,
  not the batch shell; ``scancel --signal=USR1 --batch JOB`` only the batch shell;
  ``--full`` both.
* ``sbatch --signal=USR1@N`` does the same as the first, N seconds before the time limit;
  slurmctld checks time limits every 30 s, so the signal comes up to ~30 s early (Slurm's docs
  say up to 60 s). ``--signal=B:USR1@N`` would signal the batch shell only.
* ``scontrol requeue JOB`` (what Lightning's SLURMEnvironment runs from its SIGUSR1 handler)
  kills the running steps ("CANCELLED ... DUE TO JOB REQUEUE"), puts the job back to PENDING
  with ``Reason=BeginTime`` for ``cred_expire`` + 1 s (120 s by default; 5 s here via
  ``AuthInfo=...,cred_expire=5``), then starts the batch script again with
  ``SLURM_RESTART_COUNT=1``. ``sched_interval=1`` makes the scheduler notice within a second
  (the default loop is 60 s). Output files of a requeued job are truncated unless the job uses
  ``--open-mode=append``.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import textwrap
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("srun", "sbatch", "sinfo", "squeue", "scontrol", "scancel")
# Debian installs the daemons in /usr/sbin, which a non-login PATH may lack.
SBIN = ("/usr/sbin", "/usr/local/sbin", "/sbin")
# Inherited variables that would make the clients talk about another allocation or cluster.
FOREIGN_PREFIXES = ("SLURM_", "SBATCH_", "SRUN_", "SALLOC_", "SQUEUE_", "SINFO_", "SCANCEL_")
FINISHED = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "OUT_OF_MEMORY",
        "BOOT_FAIL",
        "DEADLINE",
    }
)


class SlurmUnavailable(RuntimeError):
    """The SLURM daemons or clients are not installed, or the cluster could not start."""


def _which(name: str) -> str | None:
    return shutil.which(name) or shutil.which(name, path=os.pathsep.join(SBIN))


def find_binaries() -> dict[str, str]:
    """Paths of the daemons and client commands; raises SlurmUnavailable naming what is missing."""
    found = {name: _which(name) for name in (*DAEMONS, *CLIENTS)}
    missing = sorted(name for name, path in found.items() if path is None)
    if missing:
        raise SlurmUnavailable(
            f"SLURM/munge not installed (missing: {', '.join(missing)}); "
            "run scripts/install_system_packages.sh as root"
        )
    return {name: path for name, path in found.items() if path}


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def short_hostname() -> str:
    """The name slurmd looks itself up by in slurm.conf (`hostname -s`)."""
    return socket.gethostname().split(".")[0]


def clean_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """``base`` (default os.environ) without SLURM variables, with the daemons' sbin on PATH."""
    env = {k: v for k, v in (base or os.environ).items() if not k.startswith(FOREIGN_PREFIXES)}
    path = env.get("PATH", "/usr/bin:/bin").split(os.pathsep)
    env["PATH"] = os.pathsep.join(path + [d for d in SBIN if d not in path])
    return env


def slurm_conf(
    root: Path,
    *,
    node: str,
    cpus: int,
    gpus: int,
    ctld_port: int,
    slurmd_port: int,
    socket_path: Path,
) -> str:
    """slurm.conf text for one node on 127.0.0.1 with every path under ``root``."""
    gres = f" Gres=gpu:{gpus}" if gpus else ""
    return f"""\
# Private single-host test cluster, written by tests/slurm/cluster.py.
ClusterName=agentfly-test
SlurmctldHost={node}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# The private munged; cred_expire is also how long a requeued job waits before it may restart.
AuthInfo=socket={socket_path},cred_expire=5
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/run/slurmctld.pid
SlurmdPidFile={root}/run/slurmd.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
SchedulerParameters=sched_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
MailProg=/bin/true
ReturnToService=2
# Take the node as configured (CPUs, GPUs) even if the machine has fewer: a test cluster.
SlurmdParameters=config_overrides
SlurmdTimeout=60
InactiveLimit=0
KillWait=2
MinJobAge=300
JobRequeue=1
{"GresTypes=gpu" if gpus else ""}
NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus}{gres} State=UNKNOWN
PartitionName=debug Nodes={node} Default=YES MaxTime=INFINITE State=UP
"""


def _private_root(workdir: Path) -> Path:
    """A fresh directory for the cluster; short, since unix socket paths are capped at 107 bytes
    (slurmd puts per-step sockets in its spool directory)."""
    workdir.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="slurm-", dir=workdir))
    if len(str(root)) > 60:
        root.rmdir()
        root = Path(tempfile.mkdtemp(prefix="agentfly-slurm-", dir="/tmp"))
    return root


@dataclass
class SlurmCluster:
    """A running private cluster. Use ``env`` (or ``run``) for every SLURM client command."""

    root: Path
    node: str
    cpus: int
    gpus: int
    env: dict[str, str]
    bins: dict[str, str]
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def munge_socket(self) -> Path:
        return self.root / "munge" / "munge.sock"

    def run(
        self,
        cmd: str | Sequence[str],
        timeout: float = 60,
        *,
        check: bool = True,
        cwd: str | Path | None = None,
        env: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run a client command (a string goes to bash) against this cluster, capturing text.

        ``env`` adds variables to ``self.env`` (sbatch passes them on to the job)."""
        args: str | list[str] = cmd if isinstance(cmd, str) else list(cmd)
        proc = subprocess.run(
            args,
            shell=isinstance(cmd, str),
            executable="/bin/bash" if isinstance(cmd, str) else None,
            env={**self.env, **(env or {})},
            cwd=cwd or self.root,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and proc.returncode != 0:
            raise subprocess.CalledProcessError(
                proc.returncode, args, proc.stdout, proc.stderr + "\n" + self.logs()
            )
        return proc

    def sbatch(
        self,
        script: str | Path,
        *options: str,
        args: Sequence[str] = (),
        env: dict[str, str] | None = None,
        timeout: float = 30,
    ) -> str:
        """Submit a batch script file with sbatch ``options`` and script ``args``; returns the
        job id. ``env`` adds variables to the job's environment."""
        out = self.run(
            ["sbatch", "--parsable", *options, str(script), *args], timeout=timeout, env=env
        ).stdout
        return out.strip().split(";")[0]

    def job(self, job_id: str) -> dict[str, str]:
        """``scontrol show job`` as a dict (JobState, Restarts, Reason, ...); {} once forgotten."""
        out = self.run(["scontrol", "show", "job", "-o", job_id], check=False).stdout
        return dict(re.findall(r"(\w+)=(\S*)", out))

    def wait_job(
        self,
        job_id: str,
        timeout: float = 60,
        states: frozenset[str] = FINISHED,
    ) -> dict[str, str]:
        """Poll until the job is in one of ``states``; returns its scontrol record."""
        deadline = time.monotonic() + timeout
        info: dict[str, str] = {}
        while time.monotonic() < deadline:
            info = self.job(job_id)
            if info.get("JobState") in states:
                return info
            time.sleep(0.3)
        raise TimeoutError(
            f"job {job_id} not in {sorted(states)} after {timeout}s: {info}\n" + self.logs()
        )

    def node_state(self) -> str:
        out = self.run(["sinfo", "-h", "-N", "-n", self.node, "-o", "%T"], check=False, timeout=15)
        return out.stdout.strip()

    def logs(self, tail: int = 30) -> str:
        """The last lines of every daemon log, for failure messages."""
        parts = []
        for log in sorted((self.root / "log").glob("*")):
            lines = log.read_text(errors="replace").splitlines()[-tail:]
            parts.append(f"--- {log.name}\n" + "\n".join(lines))
        return "\n".join(parts)

    def stop(self) -> None:
        """Cancel this cluster's jobs, then end the daemons this object started."""
        if self.procs.get("slurmctld") and self.procs["slurmctld"].poll() is None:
            with contextlib.suppress(Exception):
                # Every job of this private cluster belongs to us (root).
                self.run(["scancel", "--user=root"], check=False, timeout=10)
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline:
                    if not self.run(["squeue", "-h"], check=False, timeout=10).stdout.strip():
                        break
                    time.sleep(0.3)
        for name in ("slurmd", "slurmctld", "munged"):
            proc = self.procs.pop(name, None)
            if proc is not None:
                _stop_group(proc)
        # slurmstepd and job tasks run in sessions of their own; they carry this cluster's
        # SLURM_CONF (a path no other cluster uses) in their environment.
        for pid in _processes_with_env(f"SLURM_CONF={self.conf}"):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


def _processes_with_env(entry: str) -> list[int]:
    """Pids (not this process) whose initial environment holds exactly ``entry``."""
    needle = b"\0" + entry.encode() + b"\0"
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            if needle in b"\0" + (proc / "environ").read_bytes() + b"\0":
                pids.append(int(proc.name))
    return pids


def _stop_group(proc: subprocess.Popen, grace: float = 5) -> None:
    """SIGTERM the process group we created for ``proc`` (its session), then SIGKILL."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=grace)
            break
        except subprocess.TimeoutExpired:
            continue
    # Stragglers of the group (a slurmstepd left by a job) get a SIGKILL too.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def _spawn(name: str, argv: list[str], root: Path, env: dict[str, str]) -> subprocess.Popen:
    out = open(root / "log" / f"{name}.out", "w")  # noqa: SIM115 - the child owns it
    try:
        return subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=root, start_new_session=True
        )
    finally:
        out.close()


def _wait(cluster: SlurmCluster, what: str, ready, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for name, proc in cluster.procs.items():
            if proc.poll() is not None:
                raise SlurmUnavailable(
                    f"{name} exited with {proc.returncode} while waiting for {what}\n"
                    + cluster.logs()
                )
        if ready():
            return
        time.sleep(0.2)
    raise SlurmUnavailable(f"timed out after {timeout}s waiting for {what}\n" + cluster.logs())


@contextlib.contextmanager
def slurm_cluster(
    workdir: str | Path,
    *,
    cpus: int | None = None,
    gpus: int = 0,
    timeout: float = 60,
) -> Iterator[SlurmCluster]:
    """Start munged, slurmctld and slurmd for one node named after this host.

    ``cpus`` defaults to this machine's count (at least 2); ``gpus`` > 0 declares that many
    ``gpu`` GRES backed by private /dev/null nodes, so ``--gpus-per-node`` is accepted (jobs
    see CUDA_VISIBLE_DEVICES=0,1,... and SLURM_GPUS_ON_NODE, but no real GPU). Raises SlurmUnavailable if a binary is missing,
    if not root (the daemons run as SlurmUser=root), or if the cluster does not come up.
    """
    bins = find_binaries()
    workdir = Path(workdir).resolve()
    if os.geteuid() != 0:
        raise SlurmUnavailable("the private SLURM test cluster runs its daemons as root")
    root = _private_root(workdir)
    for sub in ("state", "spool", "log", "run", "munge", "key"):
        (root / sub).mkdir()
    # munged wants its socket directory traversable by all and its key private to its owner.
    root.chmod(0o755)
    (root / "munge").chmod(0o755)
    (root / "key").chmod(0o700)
    key = root / "key" / "munge.key"
    key.write_bytes(secrets.token_bytes(1024))
    key.chmod(0o400)

    node = short_hostname()
    cpus = cpus or max(2, os.cpu_count() or 2)
    socket_path = root / "munge" / "munge.sock"
    (root / "slurm.conf").write_text(
        slurm_conf(
            root,
            node=node,
            cpus=cpus,
            gpus=gpus,
            ctld_port=free_port(),
            slurmd_port=free_port(),
            socket_path=socket_path,
        )
    )
    if gpus:
        # Slurm drops GPUs without device files; these are private copies of /dev/null.
        (root / "dev").mkdir()
        for index in range(gpus):
            os.mknod(root / "dev" / f"nvidia{index}", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        (root / "gres.conf").write_text(
            f"NodeName={node} Name=gpu File={root}/dev/nvidia[0-{gpus - 1}]\n"
        )
    env = clean_env()
    env["SLURM_CONF"] = str(root / "slurm.conf")
    env["MUNGE_SOCKET"] = str(socket_path)  # for `munge -S "$MUNGE_SOCKET"`; slurm reads AuthInfo
    cluster = SlurmCluster(root=root, node=node, cpus=cpus, gpus=gpus, env=env, bins=bins)
    try:
        cluster.procs["munged"] = _spawn(
            "munged",
            [
                bins["munged"],
                "--foreground",
                "--force",
                f"--socket={socket_path}",
                f"--key-file={key}",
                f"--pid-file={root}/run/munged.pid",
                f"--seed-file={root}/key/munged.seed",
                f"--log-file={root}/log/munged.log",
            ],
            root,
            env,
        )
        _wait(cluster, "munged's socket", socket_path.exists, timeout)
        cluster.procs["slurmctld"] = _spawn(
            "slurmctld", [bins["slurmctld"], "-D", "-i", "-f", str(cluster.conf)], root, env
        )

        def ctld_up() -> bool:
            ping = cluster.run(["scontrol", "ping"], check=False, timeout=15)
            return "is UP" in ping.stdout

        _wait(cluster, "slurmctld", ctld_up, timeout)
        cluster.procs["slurmd"] = _spawn(
            "slurmd", [bins["slurmd"], "-D", "-f", str(cluster.conf)], root, env
        )

        def node_idle() -> bool:
            state = cluster.node_state()
            if "drain" in state or "inval" in state:
                reason = cluster.run(["scontrol", "show", "node", node], check=False).stdout
                raise SlurmUnavailable(f"node {node} is {state}:\n{reason}\n{cluster.logs()}")
            return state == "idle"

        _wait(cluster, f"node {node} idle", node_idle, timeout)
        yield cluster
    finally:
        cluster.stop()
        if not root.is_relative_to(workdir):
            shutil.rmtree(root, ignore_errors=True)  # the short fallback outside workdir


def write_job(path: Path, body: str) -> Path:
    """A batch script at ``path``: a bash shebang, then ``body`` dedented."""
    path.write_text("#!/bin/bash\n" + textwrap.dedent(body))
    return path

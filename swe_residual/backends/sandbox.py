"""Run a process tree with a time limit, optionally inside a bubblewrap sandbox.

Commands run as uid 65534 in the sandbox's own user namespace. The sandbox shows only system
directories (read-only), a minimal /etc (no host secrets such as
/etc/shadow, no host configuration beyond what programs need to run), the Python runtime, and
what the caller binds: the workspace, a private /tmp, and read-only inputs. It has no network,
its own pid namespace and dies with its parent. Output goes to a file (not a pipe), so a
background child that keeps the descriptor open can never hang the harness, and only a bounded
head and tail of it is ever read back.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32")
# What of /etc programs need (loader, certificates, users without passwords, locale, alternatives).
ETC_ENTRIES = (
    "alternatives",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "ssl",
    "ca-certificates",
    "ca-certificates.conf",
    "localtime",
    "timezone",
    "nsswitch.conf",
    "hosts",
    "host.conf",
    "passwd",
    "group",
    "mime.types",
    "protocols",
    "services",
    "debian_version",
    "os-release",
    "bash.bashrc",
    "profile",
    "inputrc",
    "magic",
    "magic.mime",
    "gai.conf",
    "locale.alias",
    "environment",
)
OUTPUT_HEAD = 64 << 10  # bytes of a command's output kept from its start...
OUTPUT_TAIL = 448 << 10  # ...and from its end; the middle of longer output is cut
SANDBOX_UID = 65534  # commands run as "nobody" inside the sandbox's own user namespace


def bwrap_path() -> str | None:
    return shutil.which("bwrap")


# The harness's virtualenv (python + pytest for the tasks' test commands) is shown at a neutral
# path, so nothing inside reveals where the project checkout is, and a venv inside /tmp (a CI
# clone) is not hidden by the sandbox's private /tmp.
VENV_MOUNT = "/opt/swe-residual/runtime"


def _is_system(path: str) -> bool:
    return any(path == d or path.startswith(d + "/") for d in _SYSTEM_DIRS)


def runtime_mounts() -> list[tuple[str, str]]:
    """(host dir, sandbox dir) of the Python runtime that system directories do not cover."""
    mounts: list[tuple[str, str]] = []
    for base in dict.fromkeys([sys.base_prefix, os.path.realpath(sys.base_prefix)]):
        if not _is_system(base):
            mounts.append((base, base))
    if sys.prefix != sys.base_prefix:  # running from a virtualenv
        mounts.append((sys.prefix, VENV_MOUNT))
    return mounts


def runtime_path(sandboxed: bool = True) -> str:
    """PATH for agent and verifier commands: the harness's Python (with pytest) first."""
    venv_bin = (VENV_MOUNT if sandboxed and sys.prefix != sys.base_prefix else sys.prefix) + "/bin"
    base_bin = str(Path(sys.base_prefix) / "bin")
    parts = list(
        dict.fromkeys(
            [
                venv_bin,
                base_bin,
                "/usr/local/bin",
                "/usr/bin",
                "/bin",
                "/usr/local/sbin",
                "/usr/sbin",
                "/sbin",
            ]
        )
    )
    return ":".join(parts)


@dataclass
class Bind:
    src: Path
    dest: str
    writable: bool = False


@dataclass
class SandboxSpec:
    binds: list[Bind] = field(default_factory=list)
    cwd: str = "/"
    env: dict[str, str] = field(default_factory=dict)
    network: bool = False


def bwrap_argv(spec: SandboxSpec, argv: list[str], bwrap: str) -> list[str]:
    cmd = [
        bwrap,
        "--unshare-all",
        "--unshare-user",
        "--uid",
        str(SANDBOX_UID),
        "--gid",
        str(SANDBOX_UID),
        "--die-with-parent",
        "--new-session",
        "--hostname",
        "sandbox",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--clearenv",
    ]
    if spec.network:
        cmd.append("--share-net")
    for d in _SYSTEM_DIRS:
        if os.path.islink(d):
            cmd += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            cmd += ["--ro-bind", d, d]
    cmd += ["--dir", "/etc"]
    for name in ETC_ENTRIES + tuple(n for n in _etc_listing() if n.startswith("python")):
        path = f"/etc/{name}"
        if os.path.islink(path):
            cmd += ["--symlink", os.readlink(path), path]
        elif os.path.exists(path):
            cmd += ["--ro-bind", path, path]
    for b in spec.binds:
        cmd += ["--bind" if b.writable else "--ro-bind", str(b.src), b.dest]
    for src, dest in runtime_mounts():  # after /tmp, so a runtime under /tmp stays visible
        cmd += ["--ro-bind", src, dest]
    for k, v in spec.env.items():
        cmd += ["--setenv", k, v]
    cmd += ["--chdir", spec.cwd, "--"]
    return cmd + argv


def _etc_listing() -> list[str]:
    try:
        return sorted(os.listdir("/etc"))
    except OSError:
        return []


def read_bounded(path: Path, head: int = OUTPUT_HEAD, tail: int = OUTPUT_TAIL) -> str:
    """A command's output file: all of it when small, else its head and tail with a cut marker."""
    size = path.stat().st_size
    with open(path, "rb") as fh:
        if size <= head + tail:
            data = fh.read()
        else:
            first = fh.read(head)
            fh.seek(size - tail)
            data = first + f"\n[... {size - head - tail} bytes of output cut ...]\n".encode() + fh.read()
    return data.decode("utf-8", errors="replace")


@dataclass
class ProcessResult:
    exit_code: int | None
    output: str
    duration_s: float
    timed_out: bool
    limit: str | None = None  # why `watch` stopped it


class Watch(Protocol):
    interval: float  # seconds until the next look

    def over(self) -> str | None:
        """Why the command must stop now, None while it may go on."""


CGROUP_ROOT = Path("/sys/fs/cgroup")
PIDS_MAX = 2048  # processes of one command tree (a fork bomb stops here)


class Cgroup:
    """A pids (and memory) limit for one command tree, through cgroups v1 or v2 where this host
    lets the harness create them (root, cgroupfs mounted writable); otherwise no limit, and
    `available` says so. Every process left in it is killed on exit."""

    def __init__(self, memory_bytes: int | None = None, pids: int = PIDS_MAX):
        self.dirs: list[Path] = []
        name = f"swe-residual/{os.getpid()}-{time.monotonic_ns()}"
        v2 = (CGROUP_ROOT / "cgroup.controllers").is_file()
        limits = (
            {"pids": {"pids.max": pids}, "memory": {"memory.max": memory_bytes}}
            if v2
            else {
                "pids": {"pids.max": pids},
                "memory": {
                    "memory.limit_in_bytes": memory_bytes,
                    "memory.memsw.limit_in_bytes": memory_bytes,
                },
            }
        )
        try:
            for controller, files in limits.items():
                if all(v is None for v in files.values()):
                    continue
                d = (CGROUP_ROOT if v2 else CGROUP_ROOT / controller) / name
                if not d.parent.parent.is_dir() or (v2 and self.dirs):
                    continue
                d.mkdir(parents=True)
                self.dirs.append(d)
                for fname, value in files.items():
                    if value is not None and (d / fname).exists():
                        (d / fname).write_text(str(value))
        except OSError:
            self.close()
        self._procs = [str(d / "cgroup.procs").encode() for d in self.dirs]

    @property
    def available(self) -> bool:
        return bool(self.dirs)

    def enter(self) -> None:
        """In the child before exec: join the cgroups (os calls only: safe after fork)."""
        pid = str(os.getpid()).encode()
        for path in self._procs:
            fd = os.open(path, os.O_WRONLY)
            try:
                os.write(fd, pid)
            finally:
                os.close(fd)

    def close(self) -> None:
        for d in reversed(self.dirs):
            for _ in range(50):
                try:
                    pids = [int(p) for p in (d / "cgroup.procs").read_text().split()]
                except OSError:
                    pids = []
                for pid in pids:
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
                try:
                    d.rmdir()
                    break
                except OSError:
                    time.sleep(0.02)
        self.dirs = []


def run_tree(
    argv: list[str],
    *,
    timeout: float,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    output_path: Path,
    memory_bytes: int | None = None,
    watch: Watch | None = None,
) -> ProcessResult:
    """Run argv in its own session (and cgroup, when available); on timeout or exit, kill the
    whole process group and everything left in the cgroup. `watch` is asked every watch.interval
    seconds whether the command must stop (a storage limit): then it is killed the same way."""
    start = time.monotonic()
    limit = None
    cgroup = Cgroup(memory_bytes) if os.geteuid() == 0 else None
    try:
        with open(output_path, "wb") as out:
            proc = subprocess.Popen(
                argv,
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=cgroup.enter if cgroup is not None and cgroup.available else None,
            )
            timed_out = False
            deadline = start + timeout
            try:
                while True:
                    left = deadline - time.monotonic()
                    try:
                        proc.wait(
                            timeout=max(min(left, watch.interval), 0) if watch is not None else max(left, 0)
                        )
                        break
                    except subprocess.TimeoutExpired:
                        if time.monotonic() >= deadline:
                            timed_out = True
                            break
                    if watch is not None and (limit := watch.over()) is not None:
                        break
            finally:
                kill_group(proc.pid)
                proc.wait()
    finally:
        if cgroup is not None:
            cgroup.close()
    stopped = timed_out or limit is not None
    return ProcessResult(
        exit_code=None if stopped else proc.returncode,
        output=read_bounded(output_path),
        duration_s=time.monotonic() - start,
        timed_out=timed_out,
        limit=limit,
    )


def kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass

"""Machine-track snapshots, independent of the container engine: what a snapshot records and how
the pieces read from inside a container are parsed and compared.

A machine state is rebuilt by replaying its interactions into a fresh task container. The
snapshot then holds the container's filesystem and its live processes: with CRIU the processes
themselves; otherwise (`commit-restart`) the committed filesystem plus, for every process started
during the replay, what it takes to start it again - command line, cwd, environment, user, where
its output went and the TCP ports it listened on (read from /proc inside the container by
scripts/proc_capture.sh). Only the roots of those process trees are recorded: a service started
again starts its own children. A root that is only a forked copy of a shell - the subshell bash
makes for `cd x && server &`, or for a background job typed into an interactive shell - is not
itself started again (that would run the whole list once more, or start a login shell): its
children are recorded in its place, and the commands of the list that already ran are not run
again.

Replay determinism is checked by a second replay: the content digests of every path the replay
changed (the engine's own list of changed paths) must agree outside volatile paths.

Everything read from a container is hostile: fields are bounded and decoded defensively.
"""

from __future__ import annotations

import base64
import fnmatch
import hashlib
import time
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, Field

FORMAT = "swe-residual-snapshot-1"
TMUX_SOCKET = "swe-residual"  # the harness's own terminal server (tmux -L); never part of a state
# Changes every replay makes differently, or that belong to the harness: never part of the digest.
DEFAULT_VOLATILE = (
    "/proc",
    "/sys",
    "/dev",
    "/run/task",
    "/logs",
    "/tmp/.swe-residual*",
    "/tmp/tmux-*",
    "/etc/hostname",
    "/etc/hosts",
    "/etc/resolv.conf",
    "/etc/mtab",
    "/var/cache/apt",
    "/var/lib/apt/lists",
    "/var/log/apt",
    "/var/log/dpkg.log",
    "/var/log/alternatives.log",
    "/var/cache/debconf/*-old",
    "/var/cache/ldconfig",
    "*/__pycache__",
    "*.pyc",
    "/root/.cache",
    "*.pid",  # pids differ from run to run; restore rewrites them
)
MAX_ENV_ENTRIES = 512
SHELLS = ("bash", "sh", "dash", "zsh", "ash")


class ListenPort(BaseModel):
    port: int
    address: str = Field(description="where a client connects to check it (127.0.0.1 for wildcard binds)")


class ProcessSpec(BaseModel):
    """One process tree started during the replay, as it is started again on restore."""

    pid: int = Field(description="its pid in the replayed container")
    argv: list[str]
    cwd: str = "/"
    env: dict[str, str] = Field(default_factory=dict)
    uid: int = 0
    gid: int = 0
    stdout: str | None = Field(default=None, description="file its output was appended to (None: discarded)")
    stderr: str | None = Field(default=None, description="file for errors; '-' = where stdout goes")
    ports: list[ListenPort] = Field(default_factory=list)
    descendants: int = 0

    @property
    def label(self) -> str:
        text = " ".join(self.argv)
        return text if len(text) <= 80 else text[:77] + "..."


class ReplaySummary(BaseModel):
    interactions: int = 0
    commands: int = 0
    keys: int = 0
    output_mismatches: int = Field(
        default=0, description="inputs whose output digest differs from the recording"
    )
    duration_s: float = 0.0


class PidFile(BaseModel):
    path: str
    process: int = Field(description="index into Snapshot.processes")


class Stage(BaseModel):
    """A point of the replay where processes started while later interactions still changed files.

    Restoring starts those processes on the filesystem as it was then, and only afterwards applies
    what changed later (so a service whose configuration was edited after it started comes back
    with the configuration it read, as CRIU would restore it)."""

    interaction: int = Field(description="the interaction after which its processes were found running")
    processes: list[int] = Field(default_factory=list, description="indexes into Snapshot.processes")
    delta: str | None = Field(
        default=None, description="tar of what changed since the previous stage (cache dir)"
    )
    deletions: list[str] = Field(default_factory=list)


class Snapshot(BaseModel):
    format: Literal["swe-residual-snapshot-1"] = FORMAT
    key: str
    state: str
    task: str
    method: Literal["criu", "commit-restart"]
    image: str = Field(description="id of the committed image")
    tag: str
    processes: list[ProcessSpec] = Field(default_factory=list)
    pid_files: list[PidFile] = Field(default_factory=list)
    base_image: str | None = Field(
        default=None, description="the filesystem at the first stage (staged restore)"
    )
    stages: list[Stage] = Field(default_factory=list)
    final_delta: str | None = Field(default=None, description="tar of what changed after the last stage")
    final_deletions: list[str] = Field(default_factory=list)
    digest: str = Field(description="sha256 over the replay's changed paths outside volatile ones")
    changed_paths: int = 0
    deterministic: bool | None = Field(default=None, description="a second replay gave the same digest")
    differences: list[str] = Field(default_factory=list, description="why two replays differ (first few)")
    replay: ReplaySummary = Field(default_factory=ReplaySummary)
    criu: dict[str, str] | None = None
    criu_probe: str = ""
    snapshot_s: float = Field(default=0.0, description="replay + snapshot, seconds")
    replay_s: float = Field(default=0.0, description="the two replays (side by side) within snapshot_s")
    built_at: float = Field(default_factory=time.time)


# -- /proc as proc_capture.sh prints it ---------------------------------------------------------------


@dataclass
class ProcInfo:
    pid: int
    ppid: int
    uid: int
    gid: int
    start: int
    state: str
    session: int
    comm: str
    argv: list[str]
    cwd: str
    environ: list[str]
    fds: tuple[str, str, str]
    sockets: set[str] = field(default_factory=set)


def _b64(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (ValueError, TypeError):
        return b""


def _s(data: bytes) -> str:
    return data.decode("utf-8", "surrogateescape")


def _int(text: str, default: int = 0) -> int:
    try:
        return int(text)
    except ValueError:
        return default


def parse_capture(text: str) -> tuple[dict[int, ProcInfo], dict[str, tuple[str, int]]]:
    """Processes by pid, and listening TCP sockets: inode -> (local address, port)."""
    procs: dict[int, ProcInfo] = {}
    listen: dict[str, tuple[str, int]] = {}
    for line in text.splitlines():
        parts = line.split("\t")
        if parts[0] == "P" and len(parts) == 16:
            _, pid, ppid, uid, gid, start, state, sid, comm, cmd, cwd, env, f0, f1, f2, socks = parts
            argv = [_s(a) for a in _b64(cmd).split(b"\0")]
            if argv and argv[-1] == "":
                argv.pop()
            environ = [_s(e) for e in _b64(env).split(b"\0") if e]
            procs[_int(pid)] = ProcInfo(
                pid=_int(pid),
                ppid=_int(ppid),
                uid=_int(uid),
                gid=_int(gid),
                start=_int(start),
                state=state[:1],
                session=_int(sid, -1),
                comm=_s(_b64(comm)).strip(),
                argv=argv,
                cwd=_s(_b64(cwd)) or "/",
                environ=environ,
                fds=(_s(_b64(f0)), _s(_b64(f1)), _s(_b64(f2))),
                sockets={s for s in socks.split(",") if s.isdigit()},
            )
        elif parts[0] in ("T4", "T6") and len(parts) == 2:
            cols = parts[1].split()
            if len(cols) >= 10 and cols[3] == "0A" and ":" in cols[1] and cols[9].isdigit():
                addr_hex, port_hex = cols[1].rsplit(":", 1)
                try:
                    listen[cols[9]] = (_address(addr_hex), int(port_hex, 16))
                except ValueError:
                    continue
    return procs, listen


def _address(hex_addr: str) -> str:
    """The kernel's hex local address (little-endian words) as text; wildcards become 127.0.0.1."""
    raw = bytes.fromhex(hex_addr)
    if len(raw) == 4:
        ip = ".".join(str(b) for b in raw[::-1])
        return "127.0.0.1" if ip == "0.0.0.0" or ip.startswith("127.") else ip
    words = [raw[i : i + 4][::-1] for i in range(0, 16, 4)]
    flat = b"".join(words)
    if flat == bytes(16):
        return "127.0.0.1"
    if flat == bytes(15) + b"\1":
        return "::1"
    if flat[:12] == bytes(10) + b"\xff\xff":  # IPv4-mapped
        ip = ".".join(str(b) for b in flat[12:])
        return "127.0.0.1" if ip == "0.0.0.0" or ip.startswith("127.") else ip
    return ":".join(flat[i : i + 2].hex() for i in range(0, 16, 2))


def _output_target(link: str) -> str | None:
    """The file a process's output went to, when it can be reopened (never a pipe, socket, tty,
    deleted file or one of the harness's own files)."""
    if not link.startswith("/") or link.endswith(" (deleted)") or link.startswith(("/dev/", "/proc/")):
        return None
    if link.startswith("/tmp/.swe-residual"):
        return None
    return link


def _is_harness_tmux(p: ProcInfo) -> bool:
    if not p.comm.startswith("tmux"):
        return False
    return any(
        a == "-L" and i + 1 < len(p.argv) and p.argv[i + 1] == TMUX_SOCKET for i, a in enumerate(p.argv)
    )


def _forked_shell(p: ProcInfo, procs: dict[int, ProcInfo]) -> bool:
    """A subshell bash forked to run a background list: same command line as its parent shell, or
    `bash -c '<... &>'` (the list a command runner was given, its parent already gone)."""
    if p.comm not in SHELLS:
        return False
    parent = procs.get(p.ppid)
    if parent is not None and parent.comm in SHELLS and parent.argv == p.argv:
        return True
    if len(p.argv) == 3 and p.argv[1] == "-c":
        body = p.argv[2].rstrip()
        return body.endswith("&") and not body.endswith("&&")
    return False


def _init_session(procs: dict[int, ProcInfo]) -> set[int]:
    """The container's init (pid 1, the harness's keepalive) and what it forked itself: its
    session. Commands run in a container (`docker exec`) get sessions of their own, so nothing a
    state started is in it; the keepalive's idle child may appear only after the replay's first
    look at a container that has just started, and must never count as started by the state."""
    init = procs.get(1)
    if init is None or init.session != 1:
        return {1}
    return {p.pid for p in procs.values() if p.session == 1}


def started_processes(
    procs: dict[int, ProcInfo], listen: dict[str, tuple[str, int]], baseline: set[int]
) -> list[ProcessSpec]:
    """The roots of the process trees started since `baseline` (pids present before the replay),
    in start order, without the container's init and what it forks itself, nor the harness's
    terminal server and its pane shells."""
    harness = {p.pid for p in procs.values() if _is_harness_tmux(p)}
    harness |= {p.pid for p in procs.values() if p.ppid in harness}  # the panes' shells
    harness |= _init_session(procs)
    ours = {
        pid
        for pid, p in procs.items()
        if pid not in baseline and pid not in harness and pid != 1 and p.state not in ("Z", "X")
    }
    children: dict[int, list[int]] = {}
    for pid in ours:
        children.setdefault(procs[pid].ppid, []).append(pid)

    def tree(pid: int) -> list[int]:
        out, todo = [], [pid]
        while todo:
            q = todo.pop()
            out.append(q)
            todo.extend(children.get(q, []))
        return out

    def expand(pid: int) -> list[int]:
        kids = children.get(pid, [])
        if kids and _forked_shell(procs[pid], procs):
            return [q for k in kids for q in expand(k)]
        return [pid]

    tops = [pid for pid in ours if procs[pid].ppid not in ours]
    roots = sorted({q for pid in tops for q in expand(pid)}, key=lambda q: (procs[q].start, q))
    specs: list[ProcessSpec] = []
    for pid in roots:
        p = procs[pid]
        if not p.argv:
            continue  # a kernel thread or a process that just exited
        members = tree(pid)
        ports = sorted(
            {listen[i] for q in members for i in procs[q].sockets if i in listen}, key=lambda a: (a[1], a[0])
        )
        env = {}
        for e in p.environ[:MAX_ENV_ENTRIES]:
            if "=" in e:
                k, v = e.split("=", 1)
                env[k] = v
        out, err = _output_target(p.fds[1]), _output_target(p.fds[2])
        specs.append(
            ProcessSpec(
                pid=pid,
                argv=p.argv,
                cwd=p.cwd,
                env=env,
                uid=p.uid,
                gid=p.gid,
                stdout=out,
                stderr="-" if err is not None and err == out else err,
                ports=[ListenPort(address=a, port=port) for a, port in ports],
                descendants=len(members) - 1,
            )
        )
    return specs


def declared_up(
    procs: dict[int, ProcInfo], listen: dict[str, tuple[str, int]], wants: list[tuple[str, list[int]]]
) -> bool:
    """Every (match, ports) runs - a live process whose command line holds `match` - and listens on
    its ports (itself or a descendant)."""
    children: dict[int, list[int]] = {}
    for p in procs.values():
        children.setdefault(p.ppid, []).append(p.pid)

    def ports(pid: int) -> set[int]:
        out, todo, seen = set(), [pid], set()
        while todo:
            q = todo.pop()
            if q in seen:
                continue
            seen.add(q)
            out |= {listen[i][1] for i in procs[q].sockets if i in listen}
            todo.extend(children.get(q, []))
        return out

    for match, want in wants:
        hits = [
            p.pid
            for p in procs.values()
            if p.pid != 1 and p.state not in ("Z", "X") and match in " ".join(p.argv)
        ]
        if not any(set(want) <= ports(pid) for pid in hits):
            return False
    return True


# -- filesystem digests --------------------------------------------------------------------------------


def is_volatile(path: str, globs) -> bool:
    """True when the path or one of its ancestors matches a volatile glob."""
    parts = path.rstrip("/").split("/")
    prefixes = ["/".join(parts[:i]) or "/" for i in range(2, len(parts) + 1)]
    return any(fnmatch.fnmatchcase(p, g) for g in globs for p in prefixes)


def parse_digests(data: bytes) -> dict[str, str]:
    """fs_digest.sh's NUL-terminated records -> {path: "type mode uid gid digest"}."""
    out: dict[str, str] = {}
    for rec in data.split(b"\0"):
        cols = rec.split(b"\t")
        if len(cols) != 6:
            continue
        path = _s(cols[5])
        out[path] = " ".join(_s(c) for c in cols[:5])
    return out


def tree_digest(entries: dict[str, str]) -> str:
    h = hashlib.sha256()
    for path in sorted(entries):
        h.update(path.encode("utf-8", "surrogateescape") + b"\0" + entries[path].encode() + b"\n")
    return h.hexdigest()


def differences(a: dict[str, str], b: dict[str, str], limit: int = 10) -> list[str]:
    """Paths whose state differs between two replays (a path only one of them changed included)."""
    diff = sorted(p for p in set(a) | set(b) if a.get(p) != b.get(p))
    out = [
        f"{p}: {'absent' if p not in a else a[p].split()[0]} vs {'absent' if p not in b else b[p].split()[0]}"
        if (p not in a or p not in b)
        else f"{p}: content differs"
        for p in diff[:limit]
    ]
    if len(diff) > limit:
        out.append(f"... {len(diff) - limit} more paths")
    return out


def process_differences(a: list[ProcessSpec], b: list[ProcessSpec]) -> list[str]:
    key = lambda s: (tuple(s.argv), s.cwd, s.uid, tuple(p.port for p in s.ports))
    ka, kb = sorted(map(key, a)), sorted(map(key, b))
    if ka == kb:
        return []
    only_a = [" ".join(k[0])[:80] for k in ka if k not in kb]
    only_b = [" ".join(k[0])[:80] for k in kb if k not in ka]
    return [f"live processes differ: only in the first replay {only_a}, only in the second {only_b}"]

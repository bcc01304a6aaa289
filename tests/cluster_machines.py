"""A real multi-node Ray cluster on this one machine, for tests and benchmarks: the head in this
network namespace, each node a process group in a network namespace of its own (veth pairs on a
bridge that sits in a namespace of its own too: the host's FORWARD DROP never sees its traffic),
with a private dockerd, its own Ray temp dir and disk, and a tmpfs over `hidden` in its mount
namespace (the controller's run dirs are not visible there). Needs root, `ip`, dockerd and the
`cluster` extra. Nodes join one after the other (two at once time out on a loaded 2-core machine).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

PREFIX = f"swrc{os.getpid() % 10000}"
SUBNET = f"10.{200 + os.getpid() % 50}.{os.getpid() % 250}"  # a /24 of its own per process
BIN = Path(sys.executable).parent


def sh(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=check, capture_output=True, text=True)


def wait_for(what: str, cond: Callable[[], object], timeout: float, every: float = 0.3):
    """cond()'s first true value within timeout seconds, else AssertionError naming `what`."""
    end = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)


@dataclass
class Node:
    name: str
    ns: str
    ip: str
    dir: Path
    dockerd: subprocess.Popen | None = None
    ray: subprocess.Popen | None = None

    @property
    def docker_url(self) -> str:
        return f"unix://{self.dir}/docker.sock"

    def docker(self, *args: str) -> subprocess.CompletedProcess:
        return sh("docker", "-H", self.docker_url, *args, check=False)

    def containers(self, running: bool = False) -> list[str]:
        """The harness's containers on this node's engine (only the running ones: `running`)."""
        out = self.docker(
            "ps", *([] if running else ["-a"]), "-q", "--filter", "label=swe-residual.run"
        ).stdout
        return out.split()

    def workers(self, running: str = "run_job") -> list[int]:
        """Pids of this node's Ray workers running the task `running` (Ray titles them ray::NAME)."""
        pids = []
        for pid in ray_pids(self.dir):
            try:
                if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(f"ray::{running}".encode()):
                    pids.append(pid)
            except OSError:
                continue
        return pids

    def kill(self) -> None:
        """SIGKILL the node's Ray processes (its raylet, workers; not its engine)."""
        if self.ray is not None:
            for pid in ray_pids(self.dir):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                os.killpg(self.ray.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.ray.wait()
            self.ray = None


def ray_pids(node_dir: Path) -> list[int]:
    """Processes of a node's Ray (their command line or environment names its dir)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            text = (proc / "cmdline").read_bytes() + (proc / "environ").read_bytes()
        except OSError:
            continue
        cmdline = text.split(b"\0\0", 1)[0]
        if str(node_dir).encode() in text and not any(
            w in cmdline for w in (b"dockerd", b"containerd", b"swe_residual.cluster.reaper")
        ):
            pids.append(int(proc.name))
    return pids


@dataclass
class Machines:
    root: Path
    hidden: Path
    port: int = 6390 + os.getpid() % 300  # outside the range Ray gives its workers (10002-19999)
    nodes: list[Node] = field(default_factory=list)
    head: subprocess.Popen | None = None

    @property
    def address(self) -> str:
        return f"{SUBNET}.1:{self.port}"

    # -- network --------------------------------------------------------------------------------
    def network(self) -> None:
        br = f"{PREFIX}br"
        sh("ip", "netns", "add", br)
        sh("ip", "-n", br, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", br, "link", "set", "br0", "up")
        sh("ip", "link", "add", f"{PREFIX}h", "type", "veth", "peer", "name", "h0", "netns", br)
        sh("ip", "addr", "add", f"{SUBNET}.1/24", "dev", f"{PREFIX}h")
        sh("ip", "link", "set", f"{PREFIX}h", "up")
        sh("ip", "-n", br, "link", "set", "h0", "master", "br0", "up")

    def start_head(self) -> None:
        d = self.root / "head"
        d.mkdir(parents=True)
        self.head = subprocess.Popen(
            [
                str(BIN / "swe-residual"),
                "cluster",
                "head",
                f"--port={self.port}",
                f"--node-ip-address={SUBNET}.1",
                f"--temp-dir={d}",
                "--block",
            ],
            stdout=open(d / "log", "w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        from swe_residual.cluster.connection import probe

        wait_for("the head's port", lambda: probe(self.address, 1.0) is None, 60)

    # -- nodes ----------------------------------------------------------------------------------
    def add_node(self, name: str, slots: int, images: list[str]) -> Node:
        i = len(self.nodes) + 11
        br, ns = f"{PREFIX}br", f"{PREFIX}{name}"
        node = Node(name, ns, f"{SUBNET}.{i}", self.root / name)
        node.dir.mkdir(parents=True)
        sh("ip", "netns", "add", ns)
        sh(
            "ip",
            "link",
            "add",
            f"{PREFIX}{name}p",
            "netns",
            br,
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            ns,
        )
        sh("ip", "-n", ns, "addr", "add", f"{node.ip}/24", "dev", "eth0")
        sh("ip", "-n", ns, "link", "set", "eth0", "up")
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "-n", br, "link", "set", f"{PREFIX}{name}p", "master", "br0", "up")
        self.nodes.append(node)
        self._dockerd(node)
        self._join(node, slots, images)
        return node

    def _dockerd(self, node: Node) -> None:
        d = node.dir
        node.dockerd = subprocess.Popen(
            [
                "nsenter",
                f"--net=/run/netns/{node.ns}",
                "dockerd",
                f"--data-root={d}/docker",
                f"--exec-root={d}/exec",
                f"--pidfile={d}/docker.pid",
                "-H",
                f"unix://{d}/docker.sock",
                "--bridge=none",
                "--iptables=false",
                "--ip-masq=false",
            ],
            stdout=open(d / "dockerd.log", "w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        wait_for(f"dockerd of {node.name}", lambda: node.docker("info").returncode == 0, 60)

    def _join(self, node: Node, slots: int, images: list[str]) -> None:
        d = node.dir
        env = {
            "DOCKER_HOST": node.docker_url,
            "SWE_RESIDUAL_DOCKER_CACHE": f"{d}/cache",
            "SWE_RESIDUAL_NODE_DIR": f"{d}/node",
            "TMPDIR": f"{d}/tmp",
        }
        (d / "tmp").mkdir(exist_ok=True)  # a node that joins again keeps its disk
        join = [
            str(BIN / "swe-residual"),
            "cluster",
            "join",
            self.address,
            f"--slots={slots}",
            f"--name={node.name}",
            "--images-from=unix:///run/docker.sock",
            *[f"--image={i}" for i in images],
            "--block",
            "--ray-arg=--object-store-memory=209715200",
            f"--ray-arg=--temp-dir={d}/rt",
            f"--ray-arg=--node-ip-address={node.ip}",
        ]
        inner = f"mount -t tmpfs none {self.hidden} && exec " + " ".join(join)
        node.ray = subprocess.Popen(
            [
                "nsenter",
                f"--net=/run/netns/{node.ns}",
                "unshare",
                "--mount",
                "--propagation",
                "slave",
                "env",
                *[f"{k}={v}" for k, v in env.items()],
                "sh",
                "-c",
                inner,
            ],
            stdout=open(d / "join.log", "w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        # its images first (a file read: a status call per second would load the machine more)
        log = d / "join.log"
        wait_for(
            f"node {node.name} loading its images",
            lambda: b": joining " in log.read_bytes() or node.ray.poll() is not None,
            600,
            every=1.0,
        )
        assert node.ray.poll() is None, f"join of {node.name} failed: {log.read_text()[-2000:]}"
        wait_for(f"node {node.name} joining", lambda: node.name in self.alive(), 120, every=2.0)

    def alive(self) -> list[str]:
        """Names of the nodes the head lists alive with case slots."""
        out = subprocess.run(
            [str(BIN / "swe-residual"), "cluster", "status", self.address, "--format", "json"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        try:
            rows = json.loads(out.stdout)
        except ValueError:
            return []
        return [r["node"] for r in rows if r["alive"] and r["slots"]]

    def kill_head(self) -> None:
        """SIGKILL the head's Ray processes (its GCS, raylet): the cluster's address stops answering."""
        if self.head is not None:
            for pid in ray_pids(self.root / "head"):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                os.killpg(self.head.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.head.wait()
            self.head = None

    def restart(self, node: Node, slots: int) -> None:
        node.kill()
        self._join(node, slots, [])

    # -- the end --------------------------------------------------------------------------------
    def close(self) -> None:
        for node in self.nodes:
            node.kill()
            if node.dockerd is not None:
                ids = node.containers()
                if ids:
                    node.docker("rm", "-f", *ids)
                node.dockerd.terminate()
                try:
                    node.dockerd.wait(30)
                except subprocess.TimeoutExpired:
                    node.dockerd.kill()
            sh("ip", "netns", "del", node.ns, check=False)
        self.kill_head()
        sh("ip", "link", "del", f"{PREFIX}h", check=False)
        sh("ip", "netns", "del", f"{PREFIX}br", check=False)
        for node in self.nodes:  # what a dockerd killed mid-way left mounted, then its disk
            mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
            for mount in sorted((m for m in mounts if m.startswith(f"{node.dir}/")), reverse=True):
                sh("umount", "-l", mount, check=False)
            shutil.rmtree(node.dir, ignore_errors=True)
        shutil.rmtree(self.root, ignore_errors=True)  # the head's Ray session files too


def task_images(tasks: list[Path], track: str) -> list[str]:
    """The clean images of these task dirs on the host engine (built there if missing): what a node
    that ran these tasks before holds."""
    from swe_residual.backends.docker.backend import DockerBackend
    from swe_residual.tasks import load_task

    backend = DockerBackend(run_id="cluster-images")
    try:
        return [backend.images.clean(load_task(t, track)).ref for t in tasks]
    finally:
        backend.close()

"""The controller's side of a cluster run (`pytest ... --cluster ADDRESS`): every collected case is
submitted up front, each attempt a Ray task placed by this dispatcher on a node with a free case
slot (the node that already ran the case's task first: its images are there); one thread watches
the tasks, writes each record and the attempt's artifacts into the run dir (the controller stays
the one writer), reruns a case after an infra error on another node, and stops the run when the
head or every node is gone. Each pytest test waits for its own case (`run`).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from swe_residual.cluster.bundles import Outbox, unpack_artifacts
from swe_residual.cluster.connection import SLOT, connect, node_name, nodes, probe
from swe_residual.cluster.node_task import Job, Outcome, run_job
from swe_residual.errors import HarnessError, InfraError, InputError
from swe_residual.results import Record, append_record
from swe_residual.run.attempt import Case, budget_for
from swe_residual.run.session import RunSession, SessionOptions

TICK_S = 0.5
HEAD_PROBE_S = 2.0  # how often the head's port is probed ...
HEAD_MISSES = 3  # ... and how many misses in a row stop the run
NO_NODE_S = 15.0  # no node with a case slot this long while cases wait: the run stops
MARGIN_ENV = "SWE_RESIDUAL_CLUSTER_MARGIN_S"
MARGIN_S = 600.0  # beyond a case's agent and verifier budgets (preparing images on a fresh node)
RECORD_CAP = 4 << 20  # bytes of a record a node may send


def margin_s() -> float:
    """Seconds a case may run beyond its agent and verifier budgets before it is cancelled."""
    raw = os.environ.get(MARGIN_ENV, "").strip()
    try:
        value = float(raw) if raw else MARGIN_S
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise InputError(
            f"{MARGIN_ENV}={raw!r}: expected seconds (a number >= 0); unset it for {MARGIN_S:.0f}"
        )
    return value


class ClusterStopped(KeyboardInterrupt):
    """The cluster can no longer run the cases (head or every node gone): the run stops like an
    interrupt (exit 2, the resume command)."""


@dataclass
class Slot:
    """A node as the dispatcher sees it: its Ray id, name, case slots and what runs there."""

    node_id: str
    name: str
    slots: int
    running: set[str] = field(default_factory=set)
    tasks: set[str] = field(default_factory=set)  # tasks whose images it has built


@dataclass
class Waiting:
    """A case's state in the dispatcher: its next attempt, the nodes it failed on, its end."""

    case: Case
    attempt: int
    last: int
    avoid: set[str] = field(default_factory=set)
    done: threading.Event = field(default_factory=threading.Event)
    record: Record | None = None
    failed: bool = False


@dataclass
class Flight:
    waiting: Waiting
    node: Slot
    deadline: float
    started: float


class ClusterRunner:
    """Runs a session's cases on the Ray cluster at `address` (RunSession.remote)."""

    def __init__(self, session: RunSession, address: str):
        self.session, self.address = session, address
        self.margin = margin_s()
        self.ray = connect(address)
        self.outbox = Outbox(self.ray)
        self.task = self.ray.remote(run_job)  # made once: Ray exports the function once
        self.options = SessionOptions(
            backend=session.backend_name,
            agent_timeout=session.settings.agent_timeout,
            max_case_cost=session.settings.max_case_cost,
            infra_retries=0,
            run_id=session.run_id,
            regrade_mode=session.settings.regrade_mode,
        )
        self.nodes: dict[str, Slot] = {}
        self.lost: set[str] = set()  # nodes seen lost (Ray may list them alive a while longer)
        self.cases: dict[str, Waiting] = {}
        self.queue: deque[Waiting] = deque()
        self.flights: dict[Any, Flight] = {}
        self.stopped: str | None = None
        self.head_lost = False  # then nothing more is asked of the cluster (a call would wait for the head)
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._no_node_since: float | None = None
        self.per_node: dict[str, int] = {}  # attempts each node ran (the run's end prints them)

    # -- the pytest side --------------------------------------------------------------------------
    def start(self, cases: list[Case]) -> None:
        """Submit these cases (in order) and start watching them."""
        with self._lock:
            for case in cases:
                self._enqueue(case)
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="swe-residual-cluster", daemon=True)
            self._thread.start()
            # the head is watched apart from the loop: a Ray call the loop is in when the head goes
            # waits for the head (a minute or more), and the run must stop within seconds
            threading.Thread(target=self._watch_head, name="swe-residual-cluster-head", daemon=True).start()
        self._wake.set()

    def _enqueue(self, case: Case) -> Waiting:
        first = self.session.attempts_before.get(case.id, 0) + 1
        w = Waiting(case, first, first + self.session.infra_retries)
        self.cases[case.id] = w
        self.queue.append(w)
        return w

    def run(self, case: Case) -> Record:
        """The case's last record once it has one (InfraError carrying it when no attempt gave a
        valid one); ClusterStopped when the cluster stopped first."""
        with self._lock:
            w = self.cases.get(case.id)
        if w is None:
            self.start([case])
            w = self.cases[case.id]
        w.done.wait()
        if w.record is None:
            raise ClusterStopped(f"swe-residual: the cluster run stopped: {self.stopped}")
        if w.failed:
            exc = HarnessError(w.record.error or "infra error")
            exc.rule = w.record.rule or exc.rule
            exc.record = w.record
            raise exc
        return w.record

    def close(self) -> None:
        """Stop watching; cancel what still runs (an interrupted run)."""
        self._stop("the run ended")
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self.head_lost:  # a cancel or a status write would wait for the head that is gone
            return
        for ref in list(self.flights):
            try:
                self.ray.cancel(ref, force=True)
            except Exception:  # noqa: BLE001 - the cluster may be gone
                pass
        self._publish(final=True)

    # -- the watching thread ----------------------------------------------------------------------
    def _watch_head(self) -> None:
        """Probe the head's port every HEAD_PROBE_S; HEAD_MISSES misses in a row stop the run."""
        misses = 0
        while self.stopped is None:
            misses = misses + 1 if probe(self.address, timeout=2.0) else 0
            if misses >= HEAD_MISSES:
                self.head_lost = True
                self._stop(f"the cluster's head at {self.address} stopped answering")
                self._wake.set()
                return
            time.sleep(HEAD_PROBE_S)

    def _loop(self) -> None:
        last_refresh = 0.0
        while self.stopped is None:
            now = time.monotonic()
            try:
                if now - last_refresh >= HEAD_PROBE_S and not self.head_lost:
                    last_refresh = now
                    self._refresh_nodes()
                self._place()
                self._collect()
            except Exception as exc:  # noqa: BLE001 - the dispatcher must end every waiting case
                self._stop(f"the dispatcher failed: {type(exc).__name__}: {exc}")
                return
            if self._idle_too_long():
                return
            self._wake.wait(TICK_S if not self.flights else 0.05)
            self._wake.clear()

    def _idle_too_long(self) -> bool:
        """Cases wait and no node has a slot: stop after NO_NODE_S (Ray would keep them pending forever)."""
        if not (self.queue or self.flights) or any(n.slots for n in self.nodes.values()):
            self._no_node_since = None
            return False
        now = time.monotonic()
        self._no_node_since = self._no_node_since or now
        if now - self._no_node_since < NO_NODE_S:
            return False
        self._stop(f"no node of the cluster at {self.address} has a case slot (every node is gone)")
        return True

    def _refresh_nodes(self) -> None:
        seen: dict[str, Slot] = {}
        for n in nodes(self.ray):
            slots = int((n.get("Resources") or {}).get(SLOT, 0) or 0)
            if not n.get("Alive") or slots <= 0 or str(n.get("NodeID")) in self.lost:
                continue
            node_id = str(n.get("NodeID"))
            old = self.nodes.get(node_id)
            seen[node_id] = old or Slot(node_id, node_name(n), slots)
        self.nodes = seen

    def _free(self, w: Waiting) -> Slot | None:
        """A node with a free slot for this case: not one it failed on (unless no other is up), the
        one that has its task's images first, then the least busy."""
        free = [n for n in self.nodes.values() if len(n.running) < n.slots]
        others = [n for n in self.nodes.values() if n.node_id not in w.avoid]
        if others:
            free = [n for n in free if n.node_id not in w.avoid]
        key = w.case.task.id
        return min(free, key=lambda n: (key not in n.tasks, len(n.running) / n.slots), default=None)

    def _place(self) -> None:
        with self._lock:
            kept: deque[Waiting] = deque()
            while self.queue:
                w = self.queue.popleft()
                node = self._free(w)
                if node is None:
                    kept.append(w)
                    continue
                self._submit(w, node)
            self.queue = kept

    def _submit(self, w: Waiting, node: Slot) -> None:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        case = w.case
        agent = self.session.agent(case.agent)
        spec = self.session.plan.registry.spec(case.agent) if self.session.plan.registry else None
        keys = {k: os.environ[k] for k in (spec.api_key_env if spec else []) if k in os.environ}
        state = case.state
        job = Job(
            case=case,
            attempt=w.attempt,
            agent=agent,
            options=self.options,
            task=self.outbox.parcel(case.task.path),
            state=self.outbox.parcel(state.artifact_path) if state is not None else None,
            trajectory=self.outbox.parcel(state.trajectory_path)
            if state is not None and state.trajectory_path
            else None,
            keys=keys,
        )
        ref = self.task.options(
            num_cpus=0,
            resources={SLOT: 1},
            max_retries=0,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node.node_id, soft=False),
        ).remote(job)
        budget = budget_for(case.task, agent, self.session.settings.agent_timeout).wall_s
        verifier = float(getattr(case.task.config.verifier, "timeout_sec", 0) or 0)
        now = time.monotonic()
        self.flights[ref] = Flight(w, node, now + budget + 2 * verifier + self.margin, now)
        node.running.add(case.id)
        self.session.emit("start", case=case.id, worker=node.name, node=node.name)
        self._publish()

    def _collect(self) -> None:
        if not self.flights:
            return
        ready, _ = self.ray.wait(list(self.flights), num_returns=len(self.flights), timeout=0)
        for ref in ready:
            self._landed(ref, self.flights.pop(ref))
        now = time.monotonic()
        for ref, f in list(self.flights.items()):
            if now > f.deadline:
                self.flights.pop(ref)
                try:
                    self.ray.cancel(ref, force=True)
                except Exception:  # noqa: BLE001 - a node that is gone already
                    pass
                seconds = round(now - f.started)
                self._fault(
                    f,
                    f"no result from node {f.node.name} within {seconds} s (the case's agent and verifier budgets plus {self.margin:.0f} s); cancelled",
                    "infra_harness",
                )

    def _landed(self, ref, f: Flight) -> None:
        f.node.running.discard(f.waiting.case.id)
        self.per_node[f.node.name] = self.per_node.get(f.node.name, 0) + 1
        try:
            out = self.ray.get(ref, timeout=60)
        except Exception as exc:  # noqa: BLE001 - the node died, its worker crashed, a task error
            self._fault(f, self._why(exc, f.node), "infra_crash", lost=type(exc).__name__ == "NodeDiedError")
            return
        try:
            rec = self._accept(out, f)
        except InfraError as exc:
            self._fault(f, str(exc), exc.rule)
            return
        f.node.tasks.add(f.waiting.case.task.id)
        self._settle(f.waiting, rec, failed=not rec.valid and isinstance(out, Outcome) and out.infra)

    @staticmethod
    def _why(exc: Exception, node: Slot) -> str:
        kind = type(exc).__name__
        if kind in ("NodeDiedError", "WorkerCrashedError", "OwnerDiedError", "ObjectLostError"):
            return f"cluster node {node.name} was lost while running the case ({kind})"
        return f"cluster node {node.name}: the attempt's task failed: {kind}: {str(exc).strip()[-500:]}"

    def _accept(self, out: Any, f: Flight) -> Record:
        """The node's record, checked (it is hostile input), its artifacts in the run dir."""
        case, attempt = f.waiting.case, f.waiting.attempt
        if (
            not isinstance(out, Outcome)
            or not isinstance(out.record, bytes)
            or not isinstance(out.artifacts, bytes)
        ):
            raise HarnessError(f"cluster node {f.node.name}: sent no attempt outcome ({type(out).__name__})")
        if len(out.record) > RECORD_CAP:
            raise HarnessError(
                f"cluster node {f.node.name}: a record of {len(out.record):,} bytes, over {RECORD_CAP:,}"
            )
        try:
            rec = Record.model_validate_json(out.record)
        except ValueError as exc:
            raise HarnessError(
                f"cluster node {f.node.name}: sent an invalid record: {str(exc)[:300]}"
            ) from None
        if rec.case_id != case.id or rec.attempt != attempt:
            raise HarnessError(
                f"cluster node {f.node.name}: sent the record of {rec.case_id[:100]!r} attempt {rec.attempt} "
                f"for {case.id!r} attempt {attempt}"
            )
        prefix = f"cases/{case.dir_name}/attempt-{attempt}/"
        rec.artifacts = {k: v for k, v in rec.artifacts.items() if v.startswith(prefix) and ".." not in v}
        dest = self.session.run_dir / prefix
        unpack_artifacts(out.artifacts, dest, f"cluster node {f.node.name}, {case.id} attempt {attempt}")
        rec.artifacts = {k: v for k, v in rec.artifacts.items() if (self.session.run_dir / v).is_file()}
        rec.node = f.node.name
        return rec

    def _fault(self, f: Flight, why: str, rule: str, lost: bool = False) -> None:
        """An attempt that gave no record: an infra record naming the node; the case again elsewhere."""
        f.node.running.discard(f.waiting.case.id)
        if lost:  # no more cases there: a rerun waits for a node that is up
            self.lost.add(f.node.node_id)
            self.nodes.pop(f.node.node_id, None)
        w = f.waiting
        rec = w.case.record(
            attempt=w.attempt,
            backend=self.session.backend_name,
            termination="infra",
            error=why[:2000],
            rule=rule,
            harness=self.session.agent(w.case.agent).harness,
            node=f.node.name,
        )
        w.avoid.add(f.node.node_id)
        self._settle(w, rec, failed=True)

    def _settle(self, w: Waiting, rec: Record, failed: bool) -> None:
        append_record(self.session.run_dir, rec)
        self.session._record_event(rec)
        if failed and w.attempt < w.last and self.stopped is None:
            if rec.node is not None:
                w.avoid.add(next((n.node_id for n in self.nodes.values() if n.name == rec.node), ""))
            w.attempt += 1
            with self._lock:
                self.queue.append(w)
        else:
            w.record, w.failed = rec, failed and not rec.valid
            self.session.emit("end", case=w.case.id)
            w.done.set()
        self._publish()

    def _stop(self, why: str) -> None:
        if self.stopped is None:
            self.stopped = why
        for w in list(self.cases.values()):
            if not w.done.is_set() and w.record is None:
                w.done.set()

    def _publish(self, final: bool = False) -> None:
        """What runs where, for `swe-residual cluster status` (the cluster's key-value store)."""
        try:
            from ray.experimental import internal_kv

            key = f"swe_residual:running:{self.session.run_id}".encode()
            if final:
                internal_kv._internal_kv_del(key)
                return
            running = {n.name: sorted(n.running) for n in self.nodes.values() if n.running}
            value = json.dumps({"run_dir": str(self.session.run_dir), "running": running, "at": time.time()})
            internal_kv._internal_kv_put(key, value.encode(), overwrite=True)
        except Exception:  # noqa: BLE001 - the status view must never stop a run
            pass

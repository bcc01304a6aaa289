"""A run session owns one run: plan, run dir, resume, manifest, cases with retries, crash records
and the end of the run (report and gates).

The pytest plugin and the CLI (`validate`) are thin front ends over it. The controller `open`s
the session (checks the configuration before any case, creates or resumes the run dir); every
xdist worker `join`s the same run dir. results.jsonl is the single source of truth: workers
append records, and `finish` reads them back. What a process is doing (preparing images or
snapshots, which case runs, each record) goes to `events`, for the controller's live display.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from swe_residual.agents import Agent
from swe_residual.agents.preflight import check_programs
from swe_residual.backends import backend_class, get_backend
from swe_residual.backends.base import Backend
from swe_residual.errors import RULES, HarnessError, InfraError, InputError, RunDirError
from swe_residual.report.spend import SpendMeter
from swe_residual.results import (
    MANIFEST,
    RESULTS,
    Manifest,
    Record,
    StateFacts,
    TaskFacts,
    append_record,
    iter_records,
)
from swe_residual.run.attempt import Case, RunSettings, run_case
from swe_residual.run.patchcheck import state_patch_problems
from swe_residual.run.plan import Plan
from swe_residual.run.provenance import PROVENANCE, run_provenance
from swe_residual.run.reference import ReferenceChecks

if TYPE_CHECKING:  # the report code is imported by finish() only
    from swe_residual.report.gates import GateConfig, GateResult


class RemoteRunner(Protocol):
    """What runs a session's cases elsewhere (a cluster): `run` returns the case's last record (an
    InfraError with it on exc.record when every attempt failed), the records already appended."""

    def run(self, case: Case) -> Record: ...

    def start(self, cases: list[Case]) -> None: ...

    def close(self) -> None: ...


MIN_FREE_BYTES = 64 << 20
PREPARE_RETRY_S = 10.0
HOST_DOWN_S = 60.0  # a Docker host that stopped answering is avoided this long
RETRY_PAUSE_S = 2.0  # before the n-th rerun of a case after an infra error: n times this


def check_state_patches(plan: Plan, case_ids: Iterable[str] | None = None) -> None:
    """Every state of the plan (or of the cases `case_ids` names) applies at its task's base
    commit; InputError naming the first that does not."""
    if case_ids is None:
        states = plan.states
    else:
        wanted = {
            c.state.id for i in case_ids if (c := plan.by_id.get(i)) is not None and c.state is not None
        }
        states = [s for s in plan.states if s.id in wanted]
    problems = state_patch_problems(states, lambda s: plan.tracks[s.track].tasks[s.task])
    for state_id, why in problems.items():
        raise InputError(f"state {state_id}: {why}")


@dataclass(frozen=True)
class SessionOptions:
    """How a session runs its cases: the backend (on which Docker hosts: this process prefers
    hosts[host_index % n] and fails over to the others when its engine stops answering), the
    agent's time, reruns after an infra error, the run's id, where the hardened re-grade runs."""

    backend: str = "local"
    agent_timeout: float | None = None
    infra_retries: int = 2
    run_id: str | None = None
    docker_hosts: list[str] | None = None
    host_index: int = 0
    regrade_mode: str = "after"  # regrade.regrade_mode
    cluster: str | None = None  # --cluster: cases run on that cluster's nodes, not on this machine
    max_case_cost: float | None = None  # --max-case-cost: USD per case of a model-loop agent
    max_run_cost: float | None = None  # --max-run-cost: no case starts once this invocation spent it
    spend_from: int = 0  # where this invocation's records begin in results.jsonl (its size at open)


class RunSession:
    def __init__(self, plan: Plan, run_dir: Path, options: SessionOptions | None = None):
        options = options or SessionOptions()
        self.plan = plan
        self.run_dir = Path(run_dir).resolve()
        self.backend_name = options.backend
        self.hosts: list[str | None] = backend_class(options.backend).hosts(options.docker_hosts)
        self.host_index = options.host_index % len(self.hosts)
        self._down: dict[str | None, float] = {}
        self.infra_retries = max(0, options.infra_retries)
        self.cluster = options.cluster
        self.run_id = options.run_id or self.run_dir.name
        # what every attempt shares: the reference checks, the agent's time, where the re-grade runs
        self.settings = RunSettings(
            self.run_dir,
            ReferenceChecks(self.run_dir),
            agent_timeout=options.agent_timeout,
            max_case_cost=options.max_case_cost,
            regrade_mode=options.regrade_mode,
        )
        self.max_run_cost = options.max_run_cost
        self.spend_from = options.spend_from
        self.spend = SpendMeter(self.run_dir / RESULTS, options.spend_from)
        self._backends: dict[str | None, Backend] = {}
        self._agents: dict[str, Agent] = {}
        # (host, task, state) -> None when ready, else (when it failed, why): a failure is kept for a
        # few seconds (the cases right behind it fail at once), then the next attempt tries again
        self._prepared: dict[tuple[str | None, str, str | None], tuple[float, InfraError] | None] = {}
        self._lock = threading.Lock()
        self.created = False  # open() made the run dir (nothing was there)
        self.loaded: tuple | None = None  # finish(): (records, manifest) as the report read them
        self.fresh = False  # open() started a new run there (no --resume)
        self.valid_before: set[str] = set()  # --resume: cases with a valid outcome already
        self.attempts_before: dict[str, int] = {}
        # progress events (swe_residual.progress.RunProgress reads them); `worker` names this process
        self.events: Callable[[dict], None] | None = None
        self.worker = ""
        # --cluster: runs every case's attempts elsewhere (swe_residual/cluster/dispatch.py)
        self.remote: RemoteRunner | None = None
        self._load_previous()

    # -- opening ----------------------------------------------------------------------------------
    @classmethod
    def open(
        cls,
        plan: Plan,
        run_dir: Path,
        options: SessionOptions | None = None,
        *,
        resume: bool = False,
        check_states: bool = True,
    ) -> RunSession:
        """Controller side: check the configuration, then create (or resume) the run dir. With
        `check_states=False` the states' patches are left to `check_selected` (once the selection
        is known: only the states of the cases that will run are checked)."""
        run_dir = Path(run_dir)
        if resume and not ((run_dir / RESULTS).is_file() or (run_dir / MANIFEST).is_file()):
            raise InputError(f"--resume {run_dir}: no {RESULTS} or {MANIFEST} there (not a run dir)")
        if not resume and ((run_dir / RESULTS).exists() or (run_dir / MANIFEST).exists()):
            raise InputError(
                f"--run-dir {run_dir}: already holds a run; continue it with --resume {run_dir} "
                "or choose a new --run-dir"
            )
        session = cls(plan, run_dir, options)
        try:
            session.check(states=check_states)
        except BaseException:
            session.close()  # what the agents' preflight opened (a backend, its engine connection)
            raise
        session.created, session.fresh = not run_dir.exists(), not resume
        results = run_dir / RESULTS  # --max-run-cost counts what this invocation records after it
        session.spend_from = session.spend.offset = results.stat().st_size if results.is_file() else 0
        try:
            session.run_dir.mkdir(parents=True, exist_ok=True)
            free = shutil.disk_usage(session.run_dir).free
        except OSError as exc:
            raise InputError(f"--run-dir {run_dir}: cannot be created: {exc.strerror or exc}") from None
        if plan.cases and free < MIN_FREE_BYTES:
            raise InputError(
                f"--run-dir {run_dir}: only {free >> 20} MiB free on its filesystem; a run needs "
                f"at least {MIN_FREE_BYTES >> 20} MiB for records and artifacts"
            )
        session.write_manifest(c.id for c in plan.cases)
        # provenance.json, once per run: task, state and agent digests, harness version, backend
        run_provenance(session.run_dir, plan, plan.cases, session.backend_name)
        return session

    def check(self, states: bool = True) -> None:
        """Every configuration problem as one InputError before the first case."""
        limit = (
            "--max-case-cost"
            if self.settings.max_case_cost is not None
            else "--max-run-cost"
            if self.max_run_cost is not None
            else None
        )
        for name in dict.fromkeys(c.agent for c in self.plan.cases):
            self.agent(name).check()
            self.agent(name).check_spend(limit)
        for c in self.plan.cases:
            why = self.agent(c.agent).unsupported(c.task)
            if why:
                raise InputError(why)
        if states:
            check_state_patches(self.plan)
        if self.plan.cases and self.cluster is None:  # a cluster's nodes check theirs as they join
            backend_class(self.backend_name).check_available(self.hosts)
            check_programs(self.plan.cases, self.agent, lambda: self.backend)  # agents/preflight.py

    def check_selected(self, case_ids: Iterable[str]) -> None:
        """The patches of the states these cases start from apply (InputError naming the first
        that does not); a run dir `open` created for them holds nothing afterwards."""
        try:
            check_state_patches(self.plan, case_ids)
        except InputError:
            if self.fresh and not (self.run_dir / RESULTS).exists():
                if self.created:
                    shutil.rmtree(self.run_dir, ignore_errors=True)
                else:  # a dir the user made: what open() wrote into it
                    (self.run_dir / MANIFEST).unlink(missing_ok=True)
                    (self.run_dir / PROVENANCE).unlink(missing_ok=True)
                    shutil.rmtree(self.run_dir / "states", ignore_errors=True)
            raise

    def _load_previous(self) -> None:
        for rec in iter_records(self.run_dir):
            if rec.valid:
                self.valid_before.add(rec.case_id)
            self.attempts_before[rec.case_id] = max(rec.attempt, self.attempts_before.get(rec.case_id, 0))

    def done(self, case_id: str) -> bool:
        return case_id in self.valid_before

    def over_budget(self) -> str | None:
        """Why no further case may start (--max-run-cost reached by what this invocation recorded),
        else None."""
        if self.max_run_cost is None or self.spend.read() < self.max_run_cost:
            return None
        unknown = (
            f"; {self.spend.unknown} attempt(s) of unknown cost not counted" if self.spend.unknown else ""
        )
        return (
            f"--max-run-cost {self.max_run_cost:g}: ${self.spend.spent:.6g} recorded by this run{unknown}; "
            "no further case started"
        )

    # -- manifest ---------------------------------------------------------------------------------
    def write_manifest(self, case_ids: Iterable[str]) -> None:
        """Facts offline reports need for these cases (and those resumed); state patches copied in."""
        ids = list(dict.fromkeys(case_ids))
        wanted = set(ids)
        ids += [c for c in self.attempts_before if c not in wanted and c in self.plan.by_id]
        manifest = Manifest(cases=ids)
        (self.run_dir / "states").mkdir(parents=True, exist_ok=True)
        for case_id in ids:
            c = self.plan.by_id.get(case_id)
            if c is None:
                continue
            t, s = c.task, c.state
            key = f"{t.track}/{t.id}"
            if key not in manifest.tasks:
                manifest.tasks[key] = TaskFacts(
                    track=t.track,
                    tests=t.grading.required if t.grading else self._state_tests(t),
                    solution_files=t.solution_files,
                )
            if s is not None and s.id not in manifest.states:
                # a machine state's artifact is its interactions: kept as evidence, no patch
                rel = Path("states") / (
                    f"{s.id}.patch" if s.kind == "patch" else f"{s.id}.interactions.jsonl"
                )
                shutil.copyfile(s.artifact_path, self.run_dir / rel)
                manifest.states[s.id] = StateFacts(
                    track=s.track,
                    task=s.task,
                    predecessor=s.predecessor.model_dump(),
                    failing_tests=s.initial_verdict.failing_tests,
                    patch=str(rel) if s.kind == "patch" else "",
                    changed_files=s.changed_files,
                )
        if (self.run_dir / MANIFEST).is_file() and self.attempts_before:
            manifest = Manifest.read(self.run_dir).merged(manifest)
        manifest.write(self.run_dir)

    def _state_tests(self, task) -> list[str]:
        """A task without a graded test list (Terminal-Bench tasks): the tests its states' recorded
        verdicts name, when they list the passing ones too."""
        mine = [s.initial_verdict for s in self.plan.states if s.track == task.track and s.task == task.id]
        if not any(v.passing_tests for v in mine):
            return []
        return sorted({t for v in mine for t in (*v.failing_tests, *v.passing_tests)})

    # -- running ----------------------------------------------------------------------------------
    @property
    def backend(self) -> Backend:
        """The backend on this process's preferred host."""
        return self.backend_on(self.hosts[self.host_index])

    def backend_on(self, host: str | None) -> Backend:
        with self._lock:
            if host not in self._backends:
                try:
                    self._backends[host] = get_backend(self.backend_name, run_id=self.run_id, host=host)
                except InputError as exc:  # an engine that stopped answering mid-run
                    raise HarnessError(str(exc)) from None
            return self._backends[host]

    def _host_for(self, retry: int) -> str | None:
        """The host of the retry-th try of a case: the preferred one first, then the next ones;
        hosts seen down in the last HOST_DOWN_S seconds only when no other is left."""
        n = len(self.hosts)
        order = [self.hosts[(self.host_index + i) % n] for i in range(n)]
        now = time.monotonic()
        up = [h for h in order if now - self._down.get(h, -HOST_DOWN_S) >= HOST_DOWN_S] or order
        return up[retry % len(up)]

    def _check_host(self, host: str | None) -> None:
        """After an infra error: is the engine still there? If not, drop its connection and avoid it."""
        if len(self.hosts) < 2:
            return
        try:
            backend_class(self.backend_name).check_available([host], timeout=3.0)
        except InputError:
            self._down[host] = time.monotonic()
            with self._lock:
                dead = self._backends.pop(host, None)
            if dead is not None:
                try:
                    dead.close()
                except Exception:  # noqa: BLE001 - the engine is gone; nothing to release there
                    pass

    def agent(self, name: str) -> Agent:
        if name not in self._agents:
            self._agents[name] = self.plan.registry.get(name)
        return self._agents[name]

    def emit(self, kind: str, **fields) -> None:
        """One progress event (never fails the case: the display is only a view)."""
        if self.events is not None:
            try:
                self.events({"kind": kind, "worker": self.worker, **fields})
            except Exception:  # noqa: BLE001 - a broken display must not stop a run
                pass

    def _record_event(self, rec: Record | None) -> None:
        if rec is not None:
            self.emit(
                "record",
                case=rec.case_id,
                agent=rec.agent,
                start=rec.start,
                outcome=rec.outcome,
                valid=rec.valid,
                flagged=bool(rec.integrity),
            )

    def _prepare(self, case: Case, host: str | None) -> Backend:
        """Build what this case's runs share, once per process and host: the task's environment
        (its images, its base repository), then its state's (a state image, a machine snapshot).
        A failure fails the cases that need it only, and is tried again after PREPARE_RETRY_S."""
        backend = self._prepare_one(host, case, None)
        if case.state is not None:
            self._prepare_one(host, case, case.state)
        return backend

    def _prepare_one(self, host: str | None, case: Case, state) -> Backend:
        """The task's environment (state None), or its state's: a state image, a machine snapshot."""
        task_key = f"{case.track}/{case.task.id}"
        phase = "snapshots" if state is not None and state.kind == "machine" else "images"
        label = f"{task_key}/{state.id}" if state is not None else task_key
        key = (host, task_key, state.id if state is not None else None)
        known = self._prepared.get(key, ())
        if known is None:
            return self.backend_on(host)
        if known and time.monotonic() - known[0] < PREPARE_RETRY_S:
            raise type(known[1])(str(known[1]))
        self.emit("prepare", phase=phase, key=label, status="start")
        try:
            backend = self.backend_on(host)
            backend.prepare(case.task, [state] if state is not None else [])
            self._prepared[key] = None
            self.emit("prepare", phase=phase, key=label, status="done")
            return backend
        except Exception as exc:
            problem = (
                exc
                if isinstance(exc, InfraError)
                else HarnessError(f"preparing task {case.task.id}: {type(exc).__name__}: {exc}")
            )
            self._prepared[key] = (time.monotonic(), problem)
            self.emit("prepare", phase=phase, key=label, status="failed")
            raise problem from None

    def run(self, case: Case, *, grade_uncommitted: bool = False, agent: Agent | None = None) -> Record:
        """Run a case, rerunning it from a fresh instance after an infra error (up to infra_retries
        times); the last InfraError propagates (its record is on exc.record). With a `remote`
        runner (--cluster) the case's attempts run there instead, and their records come back."""
        if self.remote is not None:
            return self.remote.run(case)
        self.emit("start", case=case.id)
        try:
            return self._run(case, grade_uncommitted, agent)
        finally:
            self.emit("end", case=case.id)

    def _run(self, case: Case, grade_uncommitted: bool, agent: Agent | None) -> Record:
        first = self.attempts_before.get(case.id, 0) + 1
        last = first + self.infra_retries
        for attempt in range(first, last + 1):
            host = self._host_for(attempt - first)
            try:
                rec = self.attempt(case, attempt, host, agent=agent, grade_uncommitted=grade_uncommitted)
                self._record_event(rec)
                return rec
            except RunDirError:
                raise  # rerunning cannot help: the run itself is invalid
            except InfraError as exc:
                self._record_event(getattr(exc, "record", None))
                self._check_host(host)
                if attempt >= last or not RULES[exc.rule].retried:
                    raise
                # a short pause lets a restarting engine or a rate-limited service come back
                time.sleep(min(RETRY_PAUSE_S * (attempt - first + 1), 10.0))
        raise AssertionError("unreachable")

    def attempt(
        self,
        case: Case,
        attempt: int,
        host: str | None,
        *,
        agent: Agent | None = None,
        grade_uncommitted: bool = False,
    ) -> Record:
        """One attempt on `host`: what the case shares prepared, then the attempt (run_case); its
        record appended to this session's run dir. An InfraError propagates, its record on
        exc.record. A cluster node runs its cases through this same method."""
        agent = agent or self.agent(case.agent)
        try:
            backend = self._prepare(case, host)
        except InfraError as exc:
            rec = case.record(
                attempt=attempt,
                backend=self.backend_name,
                host=host,
                termination="infra",
                error=str(exc),
                rule=exc.rule,
                harness=agent.harness,
            )
            append_record(self.run_dir, rec)
            exc.record = rec
            raise
        return run_case(
            case,
            replace(self.settings, grade_uncommitted=True) if grade_uncommitted else self.settings,
            agent=agent,
            backend=backend,
            attempt=attempt,
        )

    def crash_record(self, case_id: str, reason: str) -> Record | None:
        """The record of a case whose process died mid-run (next attempt number, full identity)."""
        case = self.plan.by_id.get(case_id)
        if case is None:
            return None
        mine = [r for r in iter_records(self.run_dir) if r.case_id == case_id]
        last = max(mine, key=lambda r: r.attempt, default=None)
        if last is not None and last.valid:
            return None  # the case finished before the process died
        rec = case.record(
            attempt=(last.attempt if last else self.attempts_before.get(case_id, 0)) + 1,
            backend=self.backend_name,
            termination="infra",
            error=reason,
            rule="infra_crash",
            harness=self.agent(case.agent).harness,
        )
        append_record(self.run_dir, rec)
        self._record_event(rec)
        self.emit("end", case=case_id)
        return rec

    # -- finishing --------------------------------------------------------------------------------
    def finish(
        self,
        collected: Iterable[str],
        gates: GateConfig | None = None,
        baseline: Path | None = None,
        *,
        interrupted: bool = False,
        resume: str = "",
        reason: str = "",
    ) -> tuple[dict, GateResult | None]:
        """The report of the run dir and the gate result; writes summary.json, tables, csv.

        results.jsonl is decoded once (its columns and rows together), and the gates, the run
        page (`loaded`) and the comparison with the baseline (`comparison`, for compare.html)
        read the numbers the report computed from it, never a second computation.

        An interrupted run (Ctrl-C, -x) counts its collected cases without a record as `not_run`
        (not `missing`: nothing was lost), names the command that completes it (`resume`) and
        checks no gate: it has no verdict yet."""
        from swe_residual.report.gates import check_gates
        from swe_residual.report.tables import build_report, load_runs, write_outputs

        records, manifest = load_runs([self.run_dir], rows=True)  # rows: the cases, the gates, the pages
        self.loaded = (records, manifest)  # the run page reuses them: one read of the records
        self.comparison = None
        report = build_report(records, manifest, root=self.run_dir)  # first: from the columns
        report["run_dir"] = str(self.run_dir)
        expected = set(collected) | self.valid_before
        recorded, valid = set(), set()
        for r in records.rows:  # RecordRows: no pydantic Record per line (the pages read the same rows)
            recorded.add(r.case_id)
            if r.valid:
                valid.add(r.case_id)
        without = sorted(expected - recorded)
        report["cases"] = {
            "collected": len(expected),
            "recorded": len(recorded & expected),
            "missing": [] if interrupted else without,
            "infra_errors": sorted((recorded & expected) - valid),
        }
        if interrupted:
            report["cases"]["not_run"] = without
            report["interrupted"] = {
                "recorded": len(recorded & expected),
                "valid": len(valid & expected),
                "not_run": len(without),
                "collected": len(expected),
                "resume": resume,
            }
            if reason:  # what stopped it, where not Ctrl-C (--max-run-cost)
                report["interrupted"]["reason"] = reason
        # results lines that are not records: left out of every number above, named here, and the
        # run is invalid (the gates always check it, active or not)
        report["unreadable_lines"] = list(records.bad_lines)
        gate = None
        if (
            not interrupted
            and gates is not None
            and (baseline is not None or gates.active or records.bad_lines)
        ):
            base = load_runs([baseline], rows=True)[0] if baseline else None
            gate = check_gates(records, manifest, gates, base)
            if baseline is not None:  # what made the two runs: a changed task or agent config is said
                from swe_residual.report.provenance import run_differences

                gate.warnings = run_differences(baseline, self.run_dir)
            report["gates"] = {
                "status": gate.status,
                "violations": gate.violations,
                "checks": gate.checks,
                "warnings": gate.warnings,
            }
            if base is not None:  # compare.html: the same runs and numbers as the gate's
                from swe_residual.report.compare import compare_runs

                self.comparison = compare_runs(base, records)
        write_outputs(self.run_dir, report)
        self.sweep()
        return report, gate

    def sweep(self) -> None:
        """Remove what dead workers of this machine left (containers, workspaces) on every host at
        the end of a run."""
        if not self.plan.cases or self.cluster is not None:
            return
        for host in self.hosts:
            try:
                self.backend_on(host).sweep()
            except (InfraError, InputError):
                pass  # the engine went away: the next run's start sweeps

    def close(self) -> None:
        if self.remote is not None:
            self.remote.close()
        with self._lock:
            backends, self._backends = list(self._backends.values()), {}
        for backend in backends:
            backend.close()

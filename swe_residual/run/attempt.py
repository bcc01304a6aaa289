"""One attempt of one case: materialize -> agent -> verify -> flag -> record (class Attempt).

A Case is (agent, task, start, state). An Attempt appends exactly one record and
classifies every way an attempt can end by the taxonomy in swe_residual/errors.py: a counted
rule gives an outcome; an InfraError is recorded with no outcome and then propagates, so the
session can rerun the case from a fresh instance.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import time
import traceback
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

from swe_residual import integrity
from swe_residual.agents import Agent, AgentContext, AgentResult, Budget
from swe_residual.agents.config import agent_label
from swe_residual.backends.base import Backend, Environment
from swe_residual.errors import (
    BudgetExhausted,
    ContextExhausted,
    CostLimitExhausted,
    HarnessError,
    InfraError,
    RunDirError,
)
from swe_residual.interactions import FILE_NAME, dumps
from swe_residual.redact import redact
from swe_residual.results import Record, Start, TestStatus, append_record, repeat_suffix
from swe_residual.run.grader import Verification
from swe_residual.run.reference import ReferenceChecks
from swe_residual.run.verifier import Verifier
from swe_residual.states import LoadedState
from swe_residual.tasks import Task
from swe_residual.trajectory import Trajectory


@dataclass(frozen=True)
class Case:
    agent: str  # the name given to --agent (inline agents: the whole command)
    task: Task
    start: str
    state: LoadedState | None = None
    view: str | None = None  # --handoff-view: the request also shows the predecessor's trajectory
    repeat: int = 1  # --repeat K: which of the case's K independent runs (1 keeps the id it had)
    id: str = field(init=False, compare=False)
    agent_label: str = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        label = agent_label(self.agent)
        base = f"{label}-{self.task.id}-{self.start}"
        object.__setattr__(self, "agent_label", label)
        case_id = f"{base}-{self.state.id}" if self.state is not None else base
        case_id = f"{case_id}+{self.view}" if self.view else case_id
        object.__setattr__(self, "id", case_id + repeat_suffix(self.repeat))

    @property
    def track(self) -> str:
        return self.task.track

    @property
    def dir_name(self) -> str:
        return case_dir_name(self.id, self.repeat)

    def record(self, **fields) -> Record:
        """A record of this case with its identity filled in (verdict infra_error until decided)."""
        s = self.state
        return Record(
            case_id=self.id,
            agent=self.agent_label,
            track=self.track,
            task=self.task.id,
            start=cast(Start, f"{self.start}+{self.view}" if self.view else self.start),
            state=s.id if s else None,
            predecessor=s.predecessor.model_dump() if s else None,
            repeat=self.repeat,
            **{"verdict": "infra_error", **fields},
        )


def case_dir_name(case_id: str, repeat: int = 1) -> str:
    """A case's artifacts dir under cases/: path-safe, at most 120 characters; a repeat k > 1 in
    repeat-k/ under the first repeat's dir (no flat name could be unique: state ids may end in
    anything a suffix could be)."""
    base = case_id[: len(case_id) - len(repeat_suffix(repeat))]
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", base)
    if len(name) > 120 or name in (".", ".."):
        name = name[:100] + "-" + hashlib.sha1(base.encode("utf-8", "surrogateescape")).hexdigest()[:12]
    return name if repeat == 1 else f"{name}/repeat-{repeat}"


def build_cases(
    agents: Iterable[str],
    tasks: Mapping[str, Task],
    states: Iterable[LoadedState],
    start: str = "both",
    views: Iterable[str] = (),
) -> list[Case]:
    """Clean cases for tasks that have residual states (the matched reference), then residual ones
    (blind, then one per handoff view)."""
    views = tuple(views)
    by_task: dict[str, list[LoadedState]] = {}
    for s in states:
        by_task.setdefault(s.task, []).append(s)
    cases: list[Case] = []
    for agent in agents:
        for task_id in sorted(by_task):
            task = tasks[task_id]
            if start in ("clean", "both"):
                cases.append(Case(agent, task, "clean"))
            if start in ("residual", "both"):
                cases.extend(Case(agent, task, "residual", s) for s in by_task[task_id])
                cases.extend(Case(agent, task, "residual", s, v) for v in views for s in by_task[task_id])
    return cases


def request_of(case: Case) -> str:
    """What the agent is asked: the task's request, the same from every start; with a handoff view,
    followed by the predecessor's trajectory as that view shows it."""
    if case.view is None or case.state is None:
        return case.task.instruction
    from swe_residual.run.handoff import handoff_notes

    return case.task.instruction.rstrip("\n") + "\n\n" + handoff_notes(case.state, case.view)


def budget_for(
    task: Task, agent: Agent, override_s: float | None = None, max_cost: float | None = None
) -> Budget:
    """The same budget for clean and residual starts: --agent-timeout, else the agent config, else
    task.toml; the cost limit --max-case-cost, else the agent config's max_case_cost."""
    return Budget(
        wall_s=override_s or agent.timeout_sec or task.config.agent.timeout_sec,
        max_steps=agent.step_limit or task.config.agent.max_steps,
        max_cost_usd=max_cost or agent.max_case_cost,
    )


def _run_agent(agent: Agent, ctx: AgentContext) -> AgentResult:
    """The agent's run, its own failures classified; InfraError (harness, model service) propagates."""
    steps = lambda: len(ctx.trajectory.steps)
    try:
        return agent.run(ctx)
    except CostLimitExhausted as exc:
        ctx.trajectory.exit_status = "cost_limit"
        return AgentResult(declared_complete=False, termination="cost_limit", steps=steps(), message=str(exc))
    except BudgetExhausted as exc:
        ctx.trajectory.exit_status = "budget"
        return AgentResult(declared_complete=False, termination="budget", steps=steps(), message=str(exc))
    except ContextExhausted as exc:
        ctx.trajectory.exit_status = "context_exhausted"
        return AgentResult(
            declared_complete=False, termination="context_exhausted", steps=steps(), message=str(exc)
        )
    except InfraError:
        raise
    except Exception as exc:  # the agent's own code failed: counted, never infra
        ctx.trajectory.exit_status = "agent_error"
        (ctx.artifacts_dir / "agent-error.txt").write_text(redact(traceback.format_exc()), encoding="utf-8")
        return AgentResult(
            declared_complete=False,
            termination="agent_error",
            steps=steps(),
            message=f"{type(exc).__name__}: {exc}",
        )


@dataclass(frozen=True)
class RunSettings:
    """What every attempt of a run shares (RunSession keeps one): where records go, the reference
    checks of its tasks' verifiers, and how its attempts are timed and graded."""

    run_dir: Path
    references: ReferenceChecks
    agent_timeout: float | None = None  # --agent-timeout: before the agent config's and the task's
    max_case_cost: float | None = None  # --max-case-cost: before the agent config's max_case_cost
    # grade the whole final tree even where the task's verifier collects only commits (DeepSWE):
    # how `validate` grades a residual state itself, whose work is uncommitted
    grade_uncommitted: bool = False
    regrade_mode: str = "after"  # where the hardened re-grade runs (regrade.regrade_mode)


class Attempt:
    """One attempt of one case, one method per phase: materialize the start, run the agent, collect
    what it left, verify (with the re-verify policy), flag, record. `timings` holds each phase's
    seconds. Reruns after an infra error are the session's (RunSession.run), not the attempt's.
    """

    def __init__(
        self, case: Case, settings: RunSettings, *, agent: Agent, backend: Backend, attempt: int = 1
    ):
        self.case, self.settings, self.agent, self.backend = case, settings, agent, backend
        self.run_dir = settings.run_dir
        self.artifacts = settings.run_dir / "cases" / case.dir_name / f"attempt-{attempt}"
        self.record = case.record(
            harness=agent.harness, attempt=attempt, backend=backend.name, host=backend.host
        )
        self.trajectory = Trajectory(agent=case.agent_label, harness=agent.harness)
        self.timings: dict[str, float] = {}
        self.env: Environment | None = None
        self.verifier = Verifier(
            backend,
            case.task,
            self.artifacts,
            settings.references,
            grade_uncommitted=settings.grade_uncommitted,
        )
        self.verification: Verification | None = None

    def _rel(self, path: Path) -> str:
        return str(path.relative_to(self.run_dir))

    def _timed(self, phase: str, started: float) -> float:
        self.timings[phase] = seconds = time.monotonic() - started
        return seconds

    # -- the attempt --------------------------------------------------------------------------------
    def run(self) -> Record:
        """Run every phase and append the record; re-raises InfraError after recording it."""
        started = time.monotonic()
        shutil.rmtree(self.artifacts, ignore_errors=True)
        try:
            self.artifacts.mkdir(parents=True)
        except OSError as exc:
            raise RunDirError(f"cannot write {self.artifacts}: {exc.strerror or exc}") from None
        try:
            try:
                self.materialize()
                self.run_agent()
                self.verify()
            finally:
                self.release()
        except Exception as exc:
            self.flag()  # an infra record that has a final state gets its flags too
            raise self.infra(exc, started) from exc
        self.flag()
        self.grade()
        return self.append(started)

    # -- phases -------------------------------------------------------------------------------------
    def materialize(self) -> None:
        """A fresh instance of the starting state with the request; a fresh verifier instance gets
        ready while the agent works (not for in-place verification), and with the re-grade beside
        the grade, the re-grade's too."""
        t0 = time.monotonic()
        case = self.case
        self.request = request_of(case)
        try:
            self.env = self.backend.materialize(case.task, case.state, self.request)
        except InfraError:
            raise
        except Exception as exc:  # an engine or host failure while building the starting state
            raise HarnessError(f"materializing the {case.start} start: {type(exc).__name__}: {exc}") from exc
        self.verifier.get_ready(self.settings.regrade_mode)
        if self.env.report:  # how a machine state was restored (method, times, processes)
            path = self.artifacts / "snapshot.json"
            path.write_text(json.dumps(self.env.report, indent=1, sort_keys=True), encoding="utf-8")
            self.record.artifacts["snapshot"] = self._rel(path)
        self._timed("materialize", t0)

    def run_agent(self) -> None:
        """The agent in the environment, within the budget; then what it left: the trajectory, its
        terminal interactions, how it ended and what it used."""
        task, record, trajectory, env = self.case.task, self.record, self.trajectory, self._environment()
        ctx = AgentContext(
            request=self.request,
            env=env,
            task=task,
            budget=budget_for(task, self.agent, self.settings.agent_timeout, self.settings.max_case_cost),
            trajectory=trajectory,
            artifacts_dir=self.artifacts,
        )
        t0 = time.monotonic()
        with env.agent_limits():  # the limits the backend measures (storage_mb) stop its commands
            result = _run_agent(self.agent, ctx)
        if env.limit_hit:  # the agent went over a limit its task declares: its limit, outcome 0
            trajectory.exit_status = "storage_limit"
            result = AgentResult(
                declared_complete=False,
                termination="storage_limit",
                steps=result.steps,
                message=env.limit_hit,
            )
        self.verifier.agent_stopped(env)
        record.agent_duration_s = round(self._timed("agent", t0), 3)
        record.declared_complete = result.declared_complete
        record.termination = result.termination
        record.steps = result.steps
        if result.termination in ("agent_error", "cost_limit") and result.message and not record.error:
            record.error = redact(result.message)[:2000]  # why the agent stopped: pages, summary
        record.prompt_tokens, record.completion_tokens, record.cost_usd = trajectory.usage()
        traj_path = self.artifacts / "trajectory.json"
        if self._write_trajectory(traj_path):
            record.artifacts["trajectory"] = self._rel(traj_path)
        if ctx.interactions:
            path = self.artifacts / FILE_NAME
            path.write_text(redact(dumps(ctx.interactions).decode("utf-8")), encoding="utf-8")
            record.artifacts["interactions"] = self._rel(path)

    def verify(self) -> None:
        """The final state graded by the hidden tests (final patch on a fresh instance, or in place)."""
        t0 = time.monotonic()
        try:
            self.verification = self.verifier.verify(self._environment())
        finally:
            for name, key in (
                ("final.patch", "patch"),
                ("final.changes", "changes"),
                ("artifacts/model.patch", "graded_patch"),  # committed work, collected (report/graded.py)
            ):
                if (self.artifacts / name).is_file():
                    self.record.artifacts[key] = self._rel(self.artifacts / name)
            self._timed("verify", t0)
        v = self.verification
        self.record.verify_duration_s = round(v.duration_s, 3)
        self.record.artifacts["verifier_log"] = self._rel(v.log_path)
        if v.hardened_s is not None:  # the hardened re-grade, within "verify"
            self.timings["verify_hardened"] = v.hardened_s
        for name, key in (
            ("verifier-channel.jsonl", "report_channel"),
            ("verifier-hardened.log", "hardened_log"),
        ):
            if (self.artifacts / name).is_file():
                self.record.artifacts[key] = self._rel(self.artifacts / name)

    def _environment(self) -> Environment:
        """The environment `materialize` made (the phases after it run only once it did)."""
        if self.env is None:
            raise HarnessError("no environment: the materialize phase did not end")
        return self.env

    def release(self) -> None:
        """Remove the environments of this attempt (whatever phase it ended in)."""
        if self.env is not None:
            self.env.close()
        self.verifier.close()

    def flag(self) -> None:
        """Integrity flags, whatever verdict the attempt got (infra too): cheat signals (`integrity`)
        and notes (`integrity_notes`) of the final state, then those of the grading channels (a
        written report the channel or the hardened re-grade contradicts; run/grading_channel.py).
        Never raises: a check that fails is itself a signal."""
        self._flag_final_state()
        v = self.verification
        if v is not None:
            self.record.integrity = [*self.record.integrity, *v.signals]
            self.record.integrity_notes = [*self.record.integrity_notes, *v.notes]

    def _flag_final_state(self) -> None:
        final_patch, ignored = self.artifacts / "final.patch", self.artifacts / "final.ignored"
        if not final_patch.is_file():
            return
        state = self.case.state
        try:
            found = integrity.assess(
                final_patch.read_bytes(),
                ignored.read_text(encoding="utf-8", errors="surrogateescape").splitlines()
                if ignored.is_file()
                else [],
                self.case.task,
                state.patch if state is not None else b"",
            )
            self.record.integrity, self.record.integrity_notes = found.signals, found.notes
        except Exception as exc:  # noqa: BLE001 - fail closed: an unread final state is flagged
            self.record.integrity = [f"{integrity.OPAQUE}: final.patch ({type(exc).__name__})"]
        if ignored.is_file():
            self.record.artifacts["ignored"] = self._rel(ignored)

    def grade(self) -> None:
        """Outcome and rule by the taxonomy (docs/errors.md): an exhausted budget or context is a
        task failure whatever the final state; otherwise the verifier's verdict."""
        v, record = self.verification, self.record
        if v is None:
            raise HarnessError("no verification to grade: the verify phase did not end")
        notes = [n for n in (self.env.limit_hit if self.env else None, v.note, v.patch_problem) if n]
        record.verdict_note = redact("; ".join(notes))[:2000] or None
        if record.termination in ("budget", "cost_limit", "context_exhausted", "storage_limit"):
            record.outcome, record.rule = 0, record.termination
        else:
            record.outcome = 1 if v.verdict.outcome == 1 else 0
            record.rule = (
                "verifier_agent_caused"
                if v.agent_caused
                else "agent_error"
                if record.termination == "agent_error"
                else "verdict"
            )
        record.verdict = "pass" if record.outcome == 1 else "fail"
        record.tests = cast(dict[str, TestStatus], v.verdict.tests)  # statuses read_statuses wrote
        record.missing_tests = v.verdict.missing

    def append(self, started: float) -> Record:
        self.record.duration_s = round(time.monotonic() - started, 3)
        append_record(self.run_dir, self.record)
        return self.record

    def _write_trajectory(self, path: Path) -> bool:
        """Write the trajectory (Trajectory.write makes every string valid); False when what the
        agent left still cannot be written: the attempt goes on without that artifact, never
        without its record. An OSError (the run dir) propagates."""
        try:
            self.trajectory.write(path)
            return True
        except OSError:
            raise
        except Exception:  # noqa: BLE001 - hostile content must not cost the attempt its record
            path.unlink(missing_ok=True)
            return False

    def infra(self, exc: Exception, started: float) -> InfraError:
        """Record an attempt that ended in an infrastructure problem (never the agent's failure) and
        return the error to raise, its record on exc.record."""
        if not isinstance(exc, InfraError):  # a harness bug or host OSError: never the agent's failure
            exc = HarnessError(f"{type(exc).__name__}: {exc}")
        record = self.record
        record.error = redact(str(exc))[:2000]
        record.rule = exc.rule
        record.termination = record.termination or "infra"
        if self.trajectory.steps and "trajectory" not in record.artifacts:
            try:
                if self._write_trajectory(self.artifacts / "trajectory.json"):
                    record.artifacts["trajectory"] = self._rel(self.artifacts / "trajectory.json")
            except OSError:
                pass  # a full run dir: append_record below says so
        self.append(started)
        exc.record = record
        return exc


def run_case(
    case: Case, settings: RunSettings, *, agent: Agent, backend: Backend, attempt: int = 1
) -> Record:
    """Run one attempt of a case and append its record (Attempt); re-raises InfraError after
    recording it."""
    return Attempt(case, settings, agent=agent, backend=backend, attempt=attempt).run()


def explain_failure(record: Record) -> str:
    failing = [t for t, s in record.tests.items() if s != "passed"]
    head = ", ".join(failing[:5]) + (f" (+{len(failing) - 5} more)" if len(failing) > 5 else "")
    note = f"; {record.verdict_note}" if record.verdict_note else ""
    return (
        f"{record.case_id}: outcome 0 (termination={record.termination}, declared_complete="
        f"{record.declared_complete}); failing: {head or 'none'}{note}"
    )

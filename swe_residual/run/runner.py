"""One attempt of one case: materialize -> agent -> final patch -> verify -> record.

A Case is (agent, task, start, state). run_case appends exactly one record per attempt and
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping

from swe_residual.agents import Agent, AgentContext, AgentResult, Budget
from swe_residual.agents.config import agent_label
from swe_residual.backends.base import Backend
from swe_residual.errors import BudgetExhausted, ContextExhausted, HarnessError, InfraError, RunDirError
from swe_residual.interactions import FILE_NAME, dumps
from swe_residual.redact import redact
from swe_residual.results import Record, append_record
from swe_residual.run import integrity
from swe_residual.run.verification import ReferenceChecks, VerifierStandby, agent_stopped, verify_with_policy
from swe_residual.states import LoadedState
from swe_residual.tasks import Task
from swe_residual.trajectory import Trajectory

HANDOFF_VIEWS = ("summary", "trace")


@dataclass(frozen=True)
class Case:
    agent: str                      # the name given to --agent (inline agents: the whole command)
    task: Task
    start: str
    state: LoadedState | None = None
    view: str | None = None         # --handoff-view: the request also shows the predecessor's trajectory
    id: str = field(init=False, compare=False)
    agent_label: str = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        label = agent_label(self.agent)
        base = f"{label}-{self.task.id}-{self.start}"
        object.__setattr__(self, "agent_label", label)
        case_id = f"{base}-{self.state.id}" if self.state is not None else base
        object.__setattr__(self, "id", f"{case_id}+{self.view}" if self.view else case_id)

    @property
    def track(self) -> str:
        return self.task.track

    @property
    def dir_name(self) -> str:
        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", self.id)
        if len(name) > 120:
            name = name[:100] + "-" + hashlib.sha1(self.id.encode()).hexdigest()[:12]
        return name

    def record(self, **fields) -> Record:
        """A record of this case with its identity filled in (verdict infra_error until decided)."""
        s = self.state
        return Record(case_id=self.id, agent=self.agent_label, track=self.track, task=self.task.id,
                      start=f"{self.start}+{self.view}" if self.view else self.start, state=s.id if s else None,
                      predecessor=s.predecessor.model_dump() if s else None, **{"verdict": "infra_error", **fields})


def build_cases(agents: Iterable[str], tasks: Mapping[str, Task], states: Iterable[LoadedState],
                start: str = "both", views: Iterable[str] = ()) -> list[Case]:
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


def budget_for(task: Task, agent: Agent, override_s: float | None = None) -> Budget:
    """The same budget for clean and residual starts: --agent-timeout, else the agent config, else task.toml."""
    return Budget(wall_s=override_s or agent.timeout_sec or task.config.agent.timeout_sec,
                  max_steps=agent.step_limit or task.config.agent.max_steps)


def _run_agent(agent: Agent, ctx: AgentContext) -> AgentResult:
    """The agent's run, its own failures classified; InfraError (harness, model service) propagates."""
    steps = lambda: len(ctx.trajectory.steps)  # noqa: E731
    try:
        return agent.run(ctx)
    except BudgetExhausted as exc:
        ctx.trajectory.exit_status = "budget"
        return AgentResult(declared_complete=False, termination="budget", steps=steps(), message=str(exc))
    except ContextExhausted as exc:
        ctx.trajectory.exit_status = "context_exhausted"
        return AgentResult(declared_complete=False, termination="context_exhausted", steps=steps(), message=str(exc))
    except InfraError:
        raise
    except Exception as exc:  # the agent's own code failed: counted, never infra
        ctx.trajectory.exit_status = "agent_error"
        (ctx.artifacts_dir / "agent-error.txt").write_text(redact(traceback.format_exc()), encoding="utf-8")
        return AgentResult(declared_complete=False, termination="agent_error", steps=steps(),
                           message=f"{type(exc).__name__}: {exc}")


def run_case(case: Case, *, agent: Agent, backend: Backend, run_dir: Path, references: ReferenceChecks,
             attempt: int = 1, agent_timeout: float | None = None, grade_uncommitted: bool = False) -> Record:
    """Run one attempt and append its record; re-raises InfraError after recording it.

    grade_uncommitted: grade the whole final tree even where the task's verifier collects only
    commits (DeepSWE) - how `validate` grades a residual state itself, whose work is uncommitted.
    """
    started = time.monotonic()
    artifacts = run_dir / "cases" / case.dir_name / f"attempt-{attempt}"
    shutil.rmtree(artifacts, ignore_errors=True)
    try:
        artifacts.mkdir(parents=True)
    except OSError as exc:
        raise RunDirError(f"cannot write {artifacts}: {exc.strerror or exc}") from None
    rel = lambda p: str(p.relative_to(run_dir))  # noqa: E731
    record = case.record(harness=agent.harness, attempt=attempt, backend=backend.name, host=backend.host)
    trajectory = Trajectory(agent=case.agent_label, harness=agent.harness)
    traj_path = artifacts / "trajectory.json"
    try:
        request = request_of(case)
        try:
            env = backend.materialize(case.task, case.state, request)
        except InfraError:
            raise
        except Exception as exc:  # an engine or host failure while building the starting state
            raise HarnessError(f"materializing the {case.start} start: {type(exc).__name__}: {exc}") from exc
        # a fresh verifier instance gets ready while the agent works (not for in-place verification)
        standby = VerifierStandby(backend, case.task) if case.task.verify_mode != "in_place" else None
        try:
            report = getattr(env, "report", None)
            if report:              # how a machine state was restored (method, times, processes)
                (artifacts / "snapshot.json").write_text(json.dumps(report, indent=1, sort_keys=True),
                                                         encoding="utf-8")
                record.artifacts["snapshot"] = rel(artifacts / "snapshot.json")
            ctx = AgentContext(request=request, env=env, task=case.task,
                               budget=budget_for(case.task, agent, agent_timeout), trajectory=trajectory,
                               artifacts_dir=artifacts)
            t0 = time.monotonic()
            result = _run_agent(agent, ctx)
            agent_stopped(case.task, env)
            record.agent_duration_s = round(time.monotonic() - t0, 3)
            record.declared_complete = result.declared_complete
            record.termination = result.termination
            record.steps = result.steps
            record.prompt_tokens, record.completion_tokens, record.cost_usd = trajectory.usage()
            trajectory.write(traj_path)
            record.artifacts["trajectory"] = rel(traj_path)
            if ctx.interactions:
                (artifacts / FILE_NAME).write_text(redact(dumps(ctx.interactions).decode("utf-8")), encoding="utf-8")
                record.artifacts["interactions"] = rel(artifacts / FILE_NAME)
            try:
                v = verify_with_policy(backend, case.task, env, artifacts, references,
                                       grade_uncommitted=grade_uncommitted, standby=standby)
            finally:
                if (artifacts / "final.patch").is_file():
                    record.artifacts["patch"] = rel(artifacts / "final.patch")
                if (artifacts / "final.changes").is_file():
                    record.artifacts["changes"] = rel(artifacts / "final.changes")
            record.verify_duration_s = round(v.duration_s, 3)
            record.artifacts["verifier_log"] = rel(v.log_path)
        finally:
            env.close()
            if standby is not None:
                standby.close()
    except Exception as exc:
        if not isinstance(exc, InfraError):  # a harness bug or host OSError: never the agent's failure
            exc = HarnessError(f"{type(exc).__name__}: {exc}")
        record.error = redact(str(exc))[:2000]
        record.rule = exc.rule
        record.termination = record.termination or "infra"
        record.duration_s = round(time.monotonic() - started, 3)
        if trajectory.steps and "trajectory" not in record.artifacts:
            try:
                trajectory.write(traj_path)
                record.artifacts["trajectory"] = rel(traj_path)
            except OSError:
                pass  # a full run dir: append_record below says so
        append_record(run_dir, record)
        exc.record = record
        raise exc
    verdict = v.verdict
    final_patch = artifacts / "final.patch"
    if final_patch.is_file():
        ignored = artifacts / "final.ignored"
        record.integrity = integrity.flags(final_patch.read_bytes(),
                                           ignored.read_text(encoding="utf-8").splitlines() if ignored.is_file() else [],
                                           case.task, case.state.patch if case.state is not None else b"")
        if ignored.is_file():
            record.artifacts["ignored"] = rel(ignored)
    notes = [n for n in (v.note, v.patch_problem) if n]
    record.verdict_note = redact("; ".join(notes))[:2000] or None
    if record.termination in ("budget", "context_exhausted"):
        # an exhausted budget or context is a task failure whatever the final state
        record.outcome, record.rule = 0, record.termination
    else:
        record.outcome = verdict.outcome
        record.rule = ("verifier_agent_caused" if v.agent_caused
                       else "agent_error" if record.termination == "agent_error" else "verdict")
    record.verdict = "pass" if record.outcome == 1 else "fail"
    record.tests = verdict.tests
    record.missing_tests = verdict.missing
    record.duration_s = round(time.monotonic() - started, 3)
    append_record(run_dir, record)
    return record


def explain_failure(record: Record) -> str:
    failing = [t for t, s in record.tests.items() if s != "passed"]
    head = ", ".join(failing[:5]) + (f" (+{len(failing) - 5} more)" if len(failing) > 5 else "")
    note = f"; {record.verdict_note}" if record.verdict_note else ""
    return (f"{record.case_id}: outcome 0 (termination={record.termination}, declared_complete="
            f"{record.declared_complete}); failing: {head or 'none'}{note}")

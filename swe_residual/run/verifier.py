"""Grading one attempt's final state (class Verifier), written once for every backend.

Where a verifier runs is one explicit per-task mode (Task.verify_mode):
fresh (repository tasks, Harbor's shared mode): the final state, not the live workspace, is
graded - the agent's final tree becomes a patch against the base commit (workspace.final_state),
the patch is applied to a fresh instance of the clean state and the hidden tests run there,
copied to /tests only then; background processes, /tmp files and anything outside the
repository cannot reach the verifier.
separate (DeepSWE): the task's `[[verifier.collect]]` hooks run in the agent's stopped
environment, /logs/artifacts is copied out and into a fresh environment of the verifier image.
in_place (machine tasks, Terminal-Bench 2): the whole container is the state, so the hidden tests
are copied to /tests of the agent's own container once the agent has stopped and run there, its
processes still running (a service the task asks for must still answer). The paths the agent
changed against the task image are kept as final.changes.

A verifier problem (hang, crash, no or unreadable report, malformed reward) is not final: the
saved final state is verified once more; if that fails too, the verifier is tried on the
reference solution's state (once per task, cached in the run dir: run/reference.py). If it works
there, the agent's code broke the tests: a valid failing verdict with a note. Otherwise it is an
infra error.

Every verification carries a report channel where the verifier is pytest, and a passing grade is
re-graded in a hardened mode (run/grading_channel.py, run/regrade.py): what either finds that the
written report does not say becomes a cheat signal of the record, unless the same check also
disagrees on the reference solution's state (ReferenceChecks.grading).
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from swe_residual.backends.base import Backend, Environment
from swe_residual.backends.workspace import final_state
from swe_residual.errors import VerifierError
from swe_residual.run import grading_channel as rc
from swe_residual.run.grader import (
    ChannelUnloadable,
    FinalInputs,
    FreshRun,
    Grader,
    Preload,
    Verification,
    VerifierStandby,
)
from swe_residual.run.grading_channel import Channel
from swe_residual.run.reference import ReferenceChecks
from swe_residual.run.regrade import HardenedRegrade, hardened_regrade
from swe_residual.tasks import Task
from swe_residual.verdicts import Verdict

# tasks whose pytest cannot import the channel plugin (an isolated interpreter): verified without it
_NO_CHANNEL: set[str] = set()


class Verifier:
    """The grading of one attempt: built with the attempt, made ready while the agent works
    (get_ready), then verify() grades the agent's final state with the re-verify policy and the
    grading channels; close() removes what it still holds.

    references: the run's ReferenceChecks (verify() needs them). grade_uncommitted: grade the whole
    final tree even where the task's verifier collects only commits (separate mode, DeepSWE) - how
    `validate` grades a residual state itself, whose work is uncommitted.
    """

    def __init__(
        self,
        backend: Backend,
        task: Task,
        artifacts_dir: Path,
        references: ReferenceChecks | None = None,
        *,
        grade_uncommitted: bool = False,
    ):
        self.grader = Grader(backend, task)
        self.artifacts_dir = artifacts_dir
        self.references = references
        self.grade_uncommitted = grade_uncommitted
        self.standby: VerifierStandby | None = None
        self.regrade: HardenedRegrade | None = None

    @property
    def task(self) -> Task:
        return self.grader.task

    # -- around the agent's run ----------------------------------------------------------------------
    def get_ready(self, regrade_mode: str) -> None:
        """While the agent works, a fresh verifier instance gets ready (not for in-place
        verification), and with the re-grade beside the grade (regrade.regrade_mode), the
        re-grade's too."""
        if self.task.verify_mode != "in_place":
            self.standby = VerifierStandby(self.grader)
            self.regrade = HardenedRegrade(self.grader, self.artifacts_dir, regrade_mode, after=self.standby)

    def agent_stopped(self, env: Environment) -> None:
        """The agent is done: its processes are killed, except where the verifier runs in place and
        the processes are part of the state being graded."""
        self.grader.agent_stopped(env)

    def close(self) -> None:
        """Remove the instances made ready and not used (whatever phase the attempt ended in)."""
        if self.standby is not None:
            self.standby.close()
        if self.regrade is not None:
            self.regrade.close()

    # -- the grade -----------------------------------------------------------------------------------
    def verify(self, env: Environment) -> Verification:
        """The grade of env's final state: one verification in the task's mode (once); on a verifier
        problem once more, then the reference policy decides who caused it (docs/errors.md); a
        verdict of the tests then checked by the grading channels, a pass re-graded hardened (by
        the re-grade made ready, else by one made here that runs after the grade)."""
        if self.references is None:
            raise TypeError("Verifier.verify needs the run's ReferenceChecks")
        regrade = self.regrade
        if regrade is None and self.task.verify_mode != "in_place":
            regrade = HardenedRegrade(self.grader, self.artifacts_dir)
        if regrade is not None:
            regrade.grading()
        try:
            v = self._once_or_twice(env, self.references, regrade)
            if not v.agent_caused:
                self._check_grading(v, self.references, regrade)
        finally:
            if regrade is not None:
                regrade.close()
        return v

    def _once_or_twice(
        self, env: Environment, references: ReferenceChecks, regrade: HardenedRegrade | None
    ) -> Verification:
        """The re-verify policy: a verifier problem is verified once more; a second one is the
        agent's when the verifier works on the reference solution's state, else infra."""
        try:
            return self.once(env, self.standby.take() if self.standby is not None else None, regrade)
        except VerifierError as first:
            problem = str(first)
            if regrade is not None:  # a re-grade begun on this try's final state: this try gave no grade
                regrade.abandon()
        try:
            v = self.once(env)
            v.note = f"re-verified once after: {problem}"
            return v
        except VerifierError as second:
            problem = str(second)
        works, detail = references.works(self)
        if not works:
            raise VerifierError(f"{problem} (twice; {detail})")
        required = self.task.grading.required if self.task.grading is not None else []
        verdict = Verdict(outcome=0, tests={t: "failed" for t in required}, missing=list(required))
        return Verification(
            verdict=verdict,
            duration_s=0.0,
            log_path=self.artifacts_dir / "verifier.log",
            note=f"the agent's state breaks the verifier: {problem} (twice); {detail}",
            agent_caused=True,
        )

    def _check_grading(
        self, v: Verification, references: ReferenceChecks, regrade: HardenedRegrade | None
    ) -> None:
        """The grading channels' signals and notes on v (grading_channel.py): the channel against the
        written report; for a passing grade, the hardened re-grade (its seconds in v.hardened_s); a
        signal is checked against the reference solution's state before it stands."""
        if v.stream is None:
            signals: list[str] = []
            v.notes.append(
                f"{rc.UNAVAILABLE}: {v.channel_note or 'this backend gives the verifier no channel'}"
            )
        else:
            signals, notes = rc.channel_flags(v.stream, v.verdict)
            v.notes.extend(notes)
        if v.verdict.outcome == 1:
            if self.task.verify_mode == "in_place":
                v.notes.append(
                    f"{rc.NOT_HARDENED}: the tests ran in the agent's own container, whose state a second "
                    "run would not find as the first left it"
                )
            else:
                t0 = time.monotonic()
                try:
                    hardened = (
                        regrade.result()
                        if regrade is not None
                        else hardened_regrade(self.grader, self.artifacts_dir)
                    )
                    difference = rc.regrade_difference(v.verdict, hardened.verdict)
                    v.hardened_s = hardened.duration_s
                except VerifierError as exc:
                    difference = rc.regrade_difference(v.verdict, None, str(exc)[:300])
                    v.hardened_s = time.monotonic() - t0
                if difference:
                    signals.append(difference)
        if signals:
            signals, notes = references.grading(self).judge(signals)
            v.notes.extend(notes)
        v.signals = signals

    # -- one verification ----------------------------------------------------------------------------
    def once(
        self, env: Environment, instance: Environment | None = None, regrade: HardenedRegrade | None = None
    ) -> Verification:
        """One verification of env's final state (env is stopped and left as it is), with the report
        channel where the task's pytest can import it (grading_channel.py). Out of place it first
        writes <artifacts>/final.patch, the binary diff of the whole final tree against the base
        commit, and final.ignored, the paths .gitignore rules kept out of it; in place there is no
        patch: the tests run in env itself. instance: a fresh verifier instance made ready for it
        (closed either way). regrade: told when the final state is written (HardenedRegrade.begin).
        """
        key = self.grader.key
        use = key not in _NO_CHANNEL
        try:
            v = self._in_mode(env, instance, Channel() if use else None, regrade)
        except ChannelUnloadable:
            _NO_CHANNEL.add(key)
            v = self._in_mode(env, None, None, regrade)
            v.channel_note = (
                "the task's pytest cannot import the channel plugin (an isolated interpreter, or "
                "PYTHONPATH dropped): verified again without it"
            )
            return v
        if not use:
            v.channel_note = "the task's pytest cannot import the channel plugin (found earlier in this run)"
        return v

    def _in_mode(
        self,
        env: Environment,
        instance: Environment | None,
        channel: Channel | None,
        regrade: HardenedRegrade | None,
    ) -> Verification:
        if self.task.verify_mode == "in_place":
            if instance is not None:
                instance.close()
            return self.grader.in_place(env, self.artifacts_dir, channel)
        try:
            return self._on_fresh_instance(
                env, FreshRun(time.monotonic(), instance, channel=channel), regrade
            )
        finally:
            if instance is not None:
                instance.close()

    def _on_fresh_instance(
        self, env: Environment, run: FreshRun, regrade: HardenedRegrade | None
    ) -> Verification:
        """The final state written from env (final.patch, or the collected artifacts in separate
        mode) and graded on a fresh verifier instance (run: when the grade began, the instance
        made ready for it, the channel). The task's inputs go into that instance meanwhile."""
        artifacts_dir = self.artifacts_dir
        shutil.rmtree(artifacts_dir / "verifier", ignore_errors=True)
        if run.instance is not None:
            run.preload = Preload(run.instance, self.grader.task_inputs(), run.channel, artifacts_dir)
        final = final_state(env)
        if final.problem:  # never grade the clean state in place of a final state we could not read
            raise VerifierError(final.problem)
        patch_path = artifacts_dir / "final.patch"
        patch_path.write_bytes(final.patch)
        if final.ignored:
            (artifacts_dir / "final.ignored").write_text("\n".join(final.ignored) + "\n", encoding="utf-8")
        separate = self.task.config.verifier.environment_mode == "separate"
        collected = self.grader.collect(env, artifacts_dir) if separate else None
        if collected is not None and self.grade_uncommitted:
            (collected / "model.patch").write_bytes(final.patch)
        if regrade is not None:
            regrade.begin()
        inputs = FinalInputs(patch_path if collected is None and final.patch else None, collected)
        v = self.grader.fresh(artifacts_dir, inputs, run)
        v.patch_problem = final.problem
        return v

    # -- what the reference checks run (reference.ReferenceRuns) -------------------------------------
    def verify_reference(self, work: Path) -> Verification:
        """One verification of the reference solution's state, its outputs in `work`."""
        from swe_residual.agents.builtin import apply_reference_solution

        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        env = self.grader.backend.materialize(self.task, None)
        try:
            apply_reference_solution(env, self.task, timeout=self.task.config.agent.timeout_sec)
            self.agent_stopped(env)
            return Verifier(self.grader.backend, self.task, work).once(env)
        finally:
            env.close()

    def regrade_hardened(self, work: Path) -> Verification:
        """The hardened re-grade of the final state a verification left in `work`."""
        return hardened_regrade(self.grader, work)

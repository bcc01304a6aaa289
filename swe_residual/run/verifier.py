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
re-graded in a hardened mode with tripwire tests (run/grading_channel.py, run/regrade.py,
run/tripwires.py; in place: a second run with the tripwires): what either finds that the written
report does not say becomes a cheat signal of the record, unless the same check also disagrees on
the reference solution's state. How a case is graded (channel or not, which tripwires, whether
the verifier writes per-test reports) is decided by the reference solution's facts only
(ReferenceChecks.grading, once per task): no case changes how a later one is graded.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from swe_residual.backends.base import Backend, Environment
from swe_residual.backends.workspace import final_state
from swe_residual.errors import VerifierError
from swe_residual.run import grading_channel as rc
from swe_residual.run import hidden_tests
from swe_residual.run import tripwires as tw
from swe_residual.run.grader import (
    ChannelUnloadable,
    FinalInputs,
    FreshRun,
    Grader,
    InPlaceRun,
    Preload,
    Verification,
    VerifierStandby,
)
from swe_residual.run.grading_channel import Channel
from swe_residual.run.reference import ReferenceChecks, ReferenceGrading, ReferenceRun
from swe_residual.run.regrade import HardenedRegrade, hardened_regrade
from swe_residual.tasks import Task
from swe_residual.verdicts import Verdict


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
        verdict of the tests then checked by the grading channels and, a pass, by the tripwires in
        a second run (the hardened re-grade, made ready or made here; in place, a run in place).
        How the case is graded follows the reference solution's facts only (ReferenceChecks): known
        ones before the grade, else asked once the grade passed or a signal needs them."""
        if self.references is None:
            raise TypeError("Verifier.verify needs the run's ReferenceChecks")
        facts = self.references.known(self)
        if facts is not None:
            self.grader.read_back.landings = facts.hidden_landings
        scratch = Path(tempfile.mkdtemp(prefix=".tripwires-", dir=self.artifacts_dir.parent))
        c = _Checks(self.references, facts, scratch)
        try:
            c.arm(self)
            regrade = self.regrade
            if regrade is None and self.task.verify_mode != "in_place":
                regrade = HardenedRegrade(self.grader, self.artifacts_dir)
            if regrade is not None:
                regrade.tests = c.wires.items if c.wires is not None else None
                regrade.grading()
            c.regrade = regrade
            try:
                v = self._once_or_twice(env, facts is None or facts.channel_loadable is not False, regrade)
                if not v.agent_caused:
                    c.env = env
                    self._check_grading(v, c)
            finally:
                if regrade is not None:
                    regrade.close()
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        return v

    def _once_or_twice(
        self, env: Environment, channel: bool, regrade: HardenedRegrade | None
    ) -> Verification:
        """The re-verify policy: a verifier problem is verified once more; a second one is the
        agent's when the verifier works on the reference solution's state, else infra."""
        assert self.references is not None
        try:
            return self.once(env, self.standby.take() if self.standby is not None else None, regrade, channel)
        except VerifierError as first:
            problem = str(first)
            if regrade is not None:  # a re-grade begun on this try's final state: this try gave no grade
                regrade.abandon()
        try:
            v = self.once(env, channel=channel)
            v.note = f"re-verified once after: {problem}"
            return v
        except VerifierError as second:
            problem = str(second)
        works, detail = self.references.works(self)
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

    def _check_grading(self, v: Verification, c: _Checks) -> None:
        """The grading channels' and tripwires' signals and notes on v: the channel against the
        written report (and whether it engaged where the reference's did); a pass without the
        per-test report the reference wrote; for a passing grade, the hidden test files where they
        landed on the reference solution's state (run/hidden_tests.py, after both runs) and the
        second run with tripwires (the hardened re-grade, its seconds in v.hardened_s). A channel or
        re-grade signal is checked against the reference solution's state before it stands; a
        tripwire, missing-report or hidden-tests-changed signal makes the outcome 0."""
        facts = c.facts_for(self) if v.verdict.outcome == 1 else c.facts
        signals, notes = self._channel(v, facts)
        v.notes.extend(notes)
        if facts is not None and v.verdict.outcome == 1 and facts.per_test_reports and not v.verdict.tests:
            signals.append(
                f"{tw.REPORT_MISSING}: the grade passed without a per-test report; the verifier writes one on "
                "the reference solution's state"
            )
        if v.verdict.outcome == 1:
            signals += hidden_tests.changed(v.hidden, c.facts_for(self).hidden_landings)
            signals += self._second_run(v, c)
        if signals:
            signals, notes = c.facts_for(self).judge(signals)
            v.notes.extend(notes)
        v.signals = list(dict.fromkeys(signals))  # a file changed in both runs is one finding
        if any(s.startswith(tw.BEHAVIOURAL) for s in signals):
            v.verdict = v.verdict.model_copy(update={"outcome": 0})

    @staticmethod
    def _channel(v: Verification, facts: ReferenceGrading | None) -> tuple[list[str], list[str]]:
        """(signals, notes) of the report channel: it against the written report; a channel that did
        not engage is a signal where it engaged on the reference solution's state (asked on a pass)."""
        if v.stream is not None and v.stream.loaded:
            return rc.channel_flags(v.stream, v.verdict)
        why = v.channel_note or (
            "this backend gives the verifier no channel"
            if v.stream is None
            else "no pytest of the verifier reported on the channel"
        )
        if facts is not None and facts.channel_engaged:
            return [f"{tw.CHANNEL_DISABLED}: {why}; it engaged on the reference solution's state"], []
        if v.stream is None:
            return [], [f"{rc.UNAVAILABLE}: {why}"]
        return rc.channel_flags(v.stream, v.verdict)

    def _second_run(self, v: Verification, c: _Checks) -> list[str]:
        """The signals of the second run of a passing grade: the hardened re-grade (out of place) or a
        run in place, with the armed tripwires."""
        facts = c.facts_for(self)
        if c.arm(self) and c.regrade is not None:  # armed only now: the re-grade made ready has none
            c.regrade.abandon()
            c.regrade = None
        wires = c.wires
        mutants = wires.mutants if wires is not None else {}
        if not facts.tripwires:
            v.notes.append(f"{tw.UNARMED}: {facts.tripwire_note or facts.detail}")
        signals: list[str] = []
        t0 = time.monotonic()
        if self.task.verify_mode == "in_place":
            if wires is None:
                v.notes.append(
                    f"{rc.NOT_HARDENED}: the tests ran in the agent's own container, whose state a second "
                    "run would not find as the first left it"
                )
                return []
            try:
                assert c.env is not None
                second = self.grader.in_place(
                    c.env, self.artifacts_dir, None, InPlaceRun("verifier-tripwire", wires.items)
                )
            except VerifierError as exc:
                return [f"{tw.MISSING}: the run with tripwires gave no report ({str(exc)[:200]})"]
            v.hardened_s = second.duration_s
        else:
            try:
                second = (
                    c.regrade.result()
                    if c.regrade is not None
                    else hardened_regrade(
                        self.grader, self.artifacts_dir, None, wires.items if wires else None
                    )
                )
                v.hardened_s = second.duration_s
                required = self.task.grading is not None and bool(self.task.grading.required)
                original = tw.original_verdict(second.verdict, mutants, required)
                if difference := rc.regrade_difference(v.verdict, original):
                    signals.append(difference)
            except VerifierError as exc:
                v.hardened_s = time.monotonic() - t0
                found = [rc.regrade_difference(v.verdict, None, str(exc)[:300]) or ""]
                if (
                    facts.tripwires and facts.hardened_agrees
                ):  # it ran on the reference: this state stopped it
                    found.append(f"{tw.MISSING}: the run with tripwires gave no report")
                return found
        if facts.tripwires:
            signals += tw.check(tw.report_statuses(_logs(second)), facts.tripwires, facts.controls, mutants)
        return signals + hidden_tests.changed(second.hidden, facts.hidden_landings)

    # -- one verification ----------------------------------------------------------------------------
    def once(
        self,
        env: Environment,
        instance: Environment | None = None,
        regrade: HardenedRegrade | None = None,
        channel: bool = True,
    ) -> Verification:
        """One verification of env's final state (env is stopped and left as it is), with the report
        channel unless `channel` is False (the reference solution's pytest could not import it).
        Out of place it first writes <artifacts>/final.patch, the binary diff of the whole final
        tree against the base commit, and final.ignored, the paths .gitignore rules kept out of it;
        in place there is no patch: the tests run in env itself. instance: a fresh verifier instance
        made ready for it (closed either way). regrade: told when the final state is written
        (HardenedRegrade.begin). A pytest that cannot import the channel is verified again without
        it, in this case only: nothing of one case changes how another is graded."""
        if not channel:
            v = self._in_mode(env, instance, None, regrade)
            v.channel_note = (
                "the task's pytest cannot import the channel plugin (on the reference solution's state)"
            )
            v.channel_unloadable = True
            return v
        try:
            return self._in_mode(env, instance, Channel(), regrade)
        except ChannelUnloadable:
            v = self._in_mode(env, None, None, regrade)
            v.channel_note = (
                "the task's pytest cannot import the channel plugin (an isolated interpreter, or "
                "PYTHONPATH dropped): verified again without it"
            )
            v.channel_unloadable = True
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

    def reference_grading(self, work: Path, seed: str) -> ReferenceRun:
        """The reference solution's state verified, then run again with the tripwires of `seed`
        (the hardened re-grade; in place, a second run in the same container); outputs in `work`."""
        from swe_residual.agents.builtin import apply_reference_solution

        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        wires = tw.prepare(self.task.tests_dir, seed, work / "tripwire-tests", not self.grader.task_inputs())
        items = wires.items if wires is not None else None
        mutants = wires.mutants if wires is not None else {}
        env = self.grader.backend.materialize(self.task, None)
        try:
            apply_reference_solution(env, self.task, timeout=self.task.config.agent.timeout_sec)
            self.agent_stopped(env)
            first = Verifier(self.grader.backend, self.task, work).once(env)
            try:
                if self.task.verify_mode != "in_place":
                    second = hardened_regrade(self.grader, work, None, items)
                elif items is not None:
                    second = self.grader.in_place(env, work, None, InPlaceRun("verifier-tripwire", items))
                else:
                    second = None
            except VerifierError as exc:
                return ReferenceRun(first, None, mutants, str(exc))
            return ReferenceRun(first, second, mutants)
        finally:
            env.close()
            shutil.rmtree(work / "tripwire-tests", ignore_errors=True)


@dataclass
class _Checks:
    """What the checks of one verification use: the run's reference checks and the reference
    solution's facts (None: not known yet), the hidden tests with tripwires (None: none armed)
    made in `scratch`, the re-grade made ready, the agent's environment."""

    references: ReferenceChecks
    facts: ReferenceGrading | None
    scratch: Path
    wires: tw.Prepared | None = None
    regrade: HardenedRegrade | None = None
    env: Environment | None = None

    def facts_for(self, verifier: Verifier) -> ReferenceGrading:
        """The facts, asked now if not known (once per task: ReferenceChecks.grading)."""
        if self.facts is None:
            self.facts = self.references.grading(verifier)
            verifier.grader.read_back.landings = self.facts.hidden_landings if self.facts.seed else None
        return self.facts

    def arm(self, verifier: Verifier) -> bool:
        """Make the hidden tests with the armed tripwires, if the facts are known and they are not
        made yet; whether they were made now."""
        if self.wires is not None or self.facts is None or not self.facts.tripwires:
            return False
        baked = not verifier.grader.task_inputs()
        self.wires = tw.prepare(verifier.task.tests_dir, self.facts.seed, self.scratch / "tests", baked)
        return self.wires is not None


def _logs(v: Verification) -> Path:
    """The outputs dir of a verification (<name>/ next to <name>.log)."""
    return v.log_path.with_suffix("")

"""Questions about a task's verifier, answered on the reference solution's state once per task
(ReferenceChecks): does it work there, and how do the grading channels and the tripwires read it.

The re-verify policy asks the first when the verifier fails twice on an agent's state, the grading
channels the second before a signal stands (docs/errors.md). The runs themselves are the asking
verifier's (ReferenceRuns): these checks only decide when to run them and remember the answers.
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from swe_residual.errors import InfraError, VerifierError
from swe_residual.run import grading_channel as rc
from swe_residual.run import hidden_tests
from swe_residual.run import tripwires as tw
from swe_residual.run.grader import Verification, task_key
from swe_residual.tasks import Task

REFERENCE_RETRY_S = 30.0  # a reference check that failed is tried again after this long


class ReferenceRuns(Protocol):
    """What a reference check runs (run/verifier.py Verifier): the task's verifier on the reference
    solution's state, its outputs in `work`; with reference_grading, then its second run on the
    same state with the tripwires of `seed` (the hardened re-grade, or a run in place)."""

    @property
    def task(self) -> Task: ...

    def verify_reference(self, work: Path) -> Verification: ...

    def reference_grading(self, work: Path, seed: str) -> ReferenceRun: ...


@dataclass
class ReferenceRun:
    """The reference solution's state graded (first) and graded again with tripwires (second:
    None when it gave no verdict, `problem` says why), and the tripwires made {mutant: original}."""

    first: Verification
    second: Verification | None
    mutants: dict[str, str]
    problem: str = ""


@dataclass
class ReferenceGrading:
    """How the grading channels read the reference solution's state (None: not known): does the
    channel agree with its written report, does the hardened re-grade give its grade; did the
    channel engage (and could the task's pytest import it), did the verifier write per-test
    reports; the tripwires armed and their controls (run/tripwires.py), the seed that makes them,
    and why none is armed; where the hidden test files landed (run/hidden_tests.py)."""

    channel_agrees: bool | None = None
    hardened_agrees: bool | None = None
    detail: str = ""
    channel_engaged: bool | None = None
    channel_loadable: bool | None = None
    per_test_reports: bool | None = None
    seed: str = ""
    tripwires: list[str] = field(default_factory=list)
    controls: list[str] = field(default_factory=list)
    tripwire_note: str = ""
    hidden_landings: list[str] = field(default_factory=list)  # run/hidden_tests.py

    def judge(self, signals: list[str]) -> tuple[list[str], list[str]]:
        """(signals, notes): a finding that the same check also makes on the reference solution's
        state is a note; one that cannot be checked there stays a signal (fail closed). The
        tripwire signals were checked there when they were armed: they stand."""
        kept: list[str] = []
        notes: list[str] = []
        unchecked = False
        for s in signals:
            if s.startswith((*tw.BEHAVIOURAL, tw.CHANNEL_DISABLED)):
                kept.append(s)
                continue
            agrees = self.channel_agrees if s.startswith(rc.MISMATCH) else self.hardened_agrees
            if agrees is False:
                notes.append(
                    f"{s} (the same check disagrees on the reference solution's state: it cannot read "
                    "this task's verifier)"
                )
            else:
                kept.append(s)
                unchecked = unchecked or agrees is None
        if unchecked:
            notes.append(
                f"grading channels: a signal could not be checked on the reference solution's state "
                f"({self.detail})"
            )
        return kept, notes


class ReferenceChecks:
    """Questions about the task's verifier, answered on the reference solution's state once per
    task: does the verifier work there (works), how do the grading channels read it (grading). An
    answer is remembered in <run-dir>/reference/ (shared by every worker and a --resume); a check
    that failed only by this process, for retry_s seconds (the cases right behind it get the same
    answer at once), then the next case checks again: a transient failure never sticks."""

    def __init__(self, run_dir: Path, retry_s: float = REFERENCE_RETRY_S):
        self.dir = run_dir / "reference"
        self.retry_s = retry_s
        self._lock = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}  # one per question: tasks are checked side by side
        self._broken: dict[str, tuple[float, str]] = {}  # name -> (when the check failed, why)
        self._pause: dict[str, ReferenceGrading] = {}  # grading facts that hold until it is asked again

    def _lock_of(self, name: str) -> threading.Lock:
        with self._lock:
            return self._locks.setdefault(name, threading.Lock())

    def _failed_lately(self, name: str) -> str | None:
        known = self._broken.get(name)
        if known is not None and time.monotonic() - known[0] < self.retry_s:
            return known[1]
        self._broken.pop(name, None)
        return None

    def _remember(self, path: Path, data: dict) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data), encoding="utf-8")
        tmp.replace(path)

    def works(self, runs: ReferenceRuns) -> tuple[bool, str]:
        key = task_key(runs.task)
        path = self.dir / f"{key}.json"
        with self._lock_of(key):
            if (why := self._failed_lately(key)) is not None:
                return False, why
            if path.is_file():
                return True, json.loads(path.read_text(encoding="utf-8"))["detail"]
            works, detail = self._check(runs)
            if not works:
                self._broken[key] = (time.monotonic(), detail)
                return False, detail
            self._remember(path, {"detail": detail})
            return True, detail

    def _check(self, runs: ReferenceRuns) -> tuple[bool, str]:
        try:
            v = runs.verify_reference(self.dir / f"{task_key(runs.task)}.{os.getpid()}")
        except VerifierError as exc:
            return False, f"the verifier fails on the reference solution's state too: {exc}"
        except InfraError as exc:
            return False, f"the reference solution's state could not be checked: {exc}"
        return True, f"the verifier works on the reference solution's state (outcome {v.verdict.outcome})"

    def known(self, runs: ReferenceRuns) -> ReferenceGrading | None:
        """The facts ReferenceChecks.grading remembered for the task (None: not asked yet; nothing runs)."""
        key = f"{task_key(runs.task)}.grading"
        with self._lock_of(key):
            return _read_grading(self.dir / f"{key}.json")

    def grading(self, runs: ReferenceRuns) -> ReferenceGrading:
        """The reference solution's facts for the grading channels and the tripwires (asked on a
        task's first pass or signal: only these facts, never an agent's case, decide how a case is
        graded)."""
        key = f"{task_key(runs.task)}.grading"
        path = self.dir / f"{key}.json"
        with self._lock_of(key):
            if (why := self._failed_lately(key)) is not None:
                return self._pause.get(key) or ReferenceGrading(detail=why)
            self._pause.pop(key, None)
            if (known := _read_grading(path)) is not None:
                return known
            work = self.dir / f"{key}.{os.getpid()}"  # workers of a run may check at the same time
            try:
                seed = secrets.token_hex(8)
                ran = runs.reference_grading(work, seed)
            except (InfraError, OSError) as exc:
                why = f"the reference solution's state could not be checked: {str(exc)[:300]}"
                self._broken[key] = (time.monotonic(), why)
                return ReferenceGrading(detail=why)
            if (why := _not_good(ran)) is not None:  # never cached: a case after the pause asks again
                self._broken[key] = (time.monotonic(), why)
                self._pause[key] = _for_the_pause(_facts(runs.task, ran, seed), ran.mutants, why)
                return self._pause[key]
            result = _facts(runs.task, ran, seed)
            self._remember(path, dataclasses.asdict(result))
            return result


def _not_good(ran: ReferenceRun) -> str | None:
    """Why a reference run gives no facts to remember (None: it does): the reference solution did
    not pass, or its run with tripwires gave no verdict. Facts of such a run would grade every later
    case of the task by a failure that may be transient (tripwires none, channels unknown)."""
    if ran.first.verdict.outcome != 1:
        return (
            "the reference solution's state did not pass the verifier "
            f"(outcome {ran.first.verdict.outcome}): its grading facts are asked again later"
        )
    if ran.second is None and ran.problem:
        return (
            "the run with tripwires gave no verdict on the reference solution's state: "
            f"{ran.problem[:200]}; asked again later"
        )
    return None


def _for_the_pause(facts: ReferenceGrading, mutants: dict[str, str], why: str) -> ReferenceGrading:
    """What still holds of a reference run that is not good, for the cases until it is asked again
    (never cached): the tripwires whose original passed in the same run (an assertion and its
    negation cannot both hold, whatever else failed), with those originals as controls. Nothing
    else: channels, reports and landings stay unknown. Without them a forged pass would go
    unchecked while the reference solution fails for a moment (wall-clock tests on a busy host)."""
    armed = [m for m in facts.tripwires if mutants.get(m) in facts.controls]
    return ReferenceGrading(
        detail=why,
        seed=facts.seed if armed else "",
        tripwires=armed,
        controls=sorted({mutants[m] for m in armed}),
        tripwire_note="" if armed else why,
    )


def _facts(task: Task, ran: ReferenceRun, seed: str) -> ReferenceGrading:
    """The ReferenceGrading of one reference run."""
    v, second = ran.first, ran.second
    channel = None if v.stream is None or not v.stream.loaded else not rc.disagreements(v.stream, v.verdict)
    required = task.grading is not None and bool(task.grading.required)
    hardened = None
    if task.verify_mode != "in_place":
        hardened = second is not None and (
            rc.regrade_difference(v.verdict, tw.original_verdict(second.verdict, ran.mutants, required))
            is None
        )
    armed: list[str] = []
    controls: list[str] = []
    if not ran.mutants or second is None:  # a run with mutants and no verdict is never remembered
        note = "no hidden test function has an assertion to flip"
    else:
        armed, controls, note = tw.arm(tw.report_statuses(second.log_path.with_suffix("")), ran.mutants)
    unknown = [
        what
        for what, known in (
            ("it had no report channel", channel),
            ("the hardened re-grade does not run in place", hardened),
        )
        if known is None
    ]
    return ReferenceGrading(
        channel,
        hardened,
        "; ".join(unknown) or f"checked on the reference solution's state (outcome {v.verdict.outcome})",
        channel_engaged=v.stream is not None and v.stream.loaded,
        channel_loadable=not v.channel_unloadable,
        per_test_reports=bool(v.verdict.tests),
        seed=seed,
        tripwires=armed,
        controls=controls,
        tripwire_note=note,
        hidden_landings=hidden_tests.landed(v.hidden),
    )


def _read_grading(path: Path) -> ReferenceGrading | None:
    """A remembered ReferenceChecks.grading answer; None when there is none (or it is unreadable:
    then it is checked again)."""
    try:
        known = ReferenceGrading(**json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    flags = (known.channel_agrees, known.hardened_agrees, known.channel_engaged, known.channel_loadable)
    ok = all(isinstance(x, bool) or x is None for x in (*flags, known.per_test_reports))
    strings = (known.seed, known.detail, *known.tripwires, *known.controls, *known.hidden_landings)
    ok = ok and all(isinstance(x, str) for x in strings)
    return known if ok else None

"""Questions about a task's verifier, answered on the reference solution's state once per task
(ReferenceChecks): does it work there, and how do the grading channels read it.

The re-verify policy asks the first when the verifier fails twice on an agent's state, the grading
channels the second before a signal stands (docs/errors.md). The runs themselves are the asking
verifier's (ReferenceRuns): these checks only decide when to run them and remember the answers.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from swe_residual.errors import InfraError, VerifierError
from swe_residual.run import grading_channel as rc
from swe_residual.run.grader import Verification, task_key
from swe_residual.tasks import Task

REFERENCE_RETRY_S = 30.0  # a reference check that failed is tried again after this long


class ReferenceRuns(Protocol):
    """What a reference check runs (run/verifier.py Verifier): the task's verifier on the reference
    solution's state, its outputs in `work`; the hardened re-grade of what that left in `work`."""

    @property
    def task(self) -> Task: ...

    def verify_reference(self, work: Path) -> Verification: ...

    def regrade_hardened(self, work: Path) -> Verification: ...


@dataclass
class ReferenceGrading:
    """How the grading channels read the reference solution's state: does the channel agree with
    its written report, does the hardened re-grade give its grade (None: not known)."""

    channel_agrees: bool | None = None
    hardened_agrees: bool | None = None
    detail: str = ""

    def judge(self, signals: list[str]) -> tuple[list[str], list[str]]:
        """(signals, notes): a finding that the same check also makes on the reference solution's
        state is a note; one that cannot be checked there stays a signal (fail closed)."""
        kept: list[str] = []
        notes: list[str] = []
        unchecked = False
        for s in signals:
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
        self._broken: dict[str, tuple[float, str]] = {}  # name -> (when the check failed, why)

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
        with self._lock:
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

    def grading(self, runs: ReferenceRuns) -> ReferenceGrading:
        """The report channel and the hardened re-grade on the reference solution's state."""
        key = f"{task_key(runs.task)}.grading"
        path = self.dir / f"{key}.json"
        with self._lock:
            if (why := self._failed_lately(key)) is not None:
                return ReferenceGrading(detail=why)
            if (known := _read_grading(path)) is not None:
                return known
            work = self.dir / f"{key}.{os.getpid()}"  # workers of a run may check at the same time
            try:
                v = runs.verify_reference(work)
                channel = (
                    None
                    if v.stream is None or not v.stream.loaded
                    else not rc.disagreements(v.stream, v.verdict)
                )
                hardened = None
                if runs.task.verify_mode != "in_place":
                    try:
                        hardened = (
                            rc.regrade_difference(v.verdict, runs.regrade_hardened(work).verdict) is None
                        )
                    except VerifierError:
                        hardened = False
            except (VerifierError, InfraError) as exc:
                why = f"the reference solution's state could not be checked: {str(exc)[:300]}"
                self._broken[key] = (time.monotonic(), why)
                return ReferenceGrading(detail=why)
            unknown = [
                what
                for what, known in (
                    ("it had no report channel", channel),
                    ("the hardened re-grade does not run in place", hardened),
                )
                if known is None
            ]
            result = ReferenceGrading(
                channel,
                hardened,
                "; ".join(unknown)
                or f"checked on the reference solution's state (outcome {v.verdict.outcome})",
            )
            self._remember(
                path, {"channel_agrees": channel, "hardened_agrees": hardened, "detail": result.detail}
            )
            return result


def _read_grading(path: Path) -> ReferenceGrading | None:
    """A remembered ReferenceChecks.grading answer; None when there is none (or it is unreadable:
    then it is checked again)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        known = ReferenceGrading(data["channel_agrees"], data["hardened_agrees"], str(data["detail"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    ok = all(isinstance(x, bool) or x is None for x in (known.channel_agrees, known.hardened_agrees))
    return known if ok else None

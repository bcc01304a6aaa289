"""One Residualization work dir: the stage files, the saved artifacts and the tasks they refer to.

    WORKDIR/
      tasks.json          track -> tasks dir, remembered from the first --tasks-dir
      stage1.jsonl        PredecessorRun per predecessor run (run or imported)
      runs/<id>/          its artifacts: final.patch (or interactions.jsonl on a machine track),
                          trajectory.json, verifier logs, source files
      stage1-runs/        run dirs of `residualize run` (one per attempt number)
      stage2.jsonl        FilterDecision per Stage I run
      packets/<id>/       review packets (Stage III)
      reviews.jsonl       Review per reviewer and candidate
      stage4.jsonl        BuildOutcome per kept candidate
      construction.jsonl  Table 5 rows: one per Stage I run with the stage it reached

Lines are only appended (results.append_line), so a crash loses at most the line being written.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from swe_residual.errors import InputError
from swe_residual.residualize.records import BuildOutcome, FilterDecision, PredecessorRun, Review
from swe_residual.results import append_line
from swe_residual.tasks import Task, load_tasks

M = TypeVar("M", bound=BaseModel)

STAGE1, STAGE2, REVIEWS, STAGE4 = "stage1.jsonl", "stage2.jsonl", "reviews.jsonl", "stage4.jsonl"
CONSTRUCTION = "construction.jsonl"
TASKS = "tasks.json"


class WorkDir:
    def __init__(self, path: Path | str, *, create: bool = False):
        self.path = Path(path).resolve()
        if create:
            try:
                self.path.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise InputError(f"work dir {path}: cannot be created: {exc.strerror or exc}") from None
        elif not (self.path / STAGE1).is_file():
            raise InputError(
                f"work dir {path}: no {STAGE1} there; start with `swe-residual residualize run` "
                "or `swe-residual residualize import`"
            )
        self._tasks: dict[str, dict[str, Task]] = {}

    # -- stage files ------------------------------------------------------------------------------
    def _read(self, name: str, model: type[M]) -> Iterator[M]:
        path = self.path / name
        if not path.is_file():
            return
        with open(path, encoding="utf-8") as fh:
            for n, line in enumerate(fh, 1):
                if not line.endswith("\n"):
                    break  # a torn last line from a crash
                try:
                    yield model.model_validate_json(line)
                except ValidationError as exc:
                    err = exc.errors()[0]
                    loc = ".".join(map(str, err["loc"])) or "(line)"
                    raise InputError(f"{path}:{n}: {loc}: {err['msg']}") from None

    def append(self, name: str, line: BaseModel) -> None:
        append_line(self.path / name, line)

    def runs(self) -> dict[str, PredecessorRun]:
        """Stage I runs by id, in the order they were recorded (a later line with the same id wins)."""
        return {r.id: r for r in self._read(STAGE1, PredecessorRun)}

    def decisions(self) -> dict[str, FilterDecision]:
        return {d.run: d for d in self._read(STAGE2, FilterDecision)}

    def reviews(self) -> dict[str, dict[str, Review]]:
        """candidate -> reviewer -> their last review."""
        out: dict[str, dict[str, Review]] = {}
        for r in self._read(REVIEWS, Review):
            out.setdefault(r.candidate, {})[r.reviewer] = r
        return out

    def builds(self) -> dict[str, BuildOutcome]:
        return {b.candidate: b for b in self._read(STAGE4, BuildOutcome)}

    # -- artifacts --------------------------------------------------------------------------------
    def run_dir(self, run_id: str) -> Path:
        return self.path / "runs" / run_id

    def rel(self, path: Path) -> str:
        return str(Path(path).resolve().relative_to(self.path))

    def file(self, rel: str | None) -> Path | None:
        """A path a record names, resolved inside the work dir (never outside it)."""
        if not rel:
            return None
        p = (self.path / rel).resolve()
        if self.path not in p.parents:
            raise InputError(f"work dir {self.path}: {rel} points outside the work dir")
        return p

    def interactions_bytes(self, run: PredecessorRun) -> bytes:
        p = self.file(run.interactions)
        return p.read_bytes() if p is not None and p.is_file() else b""

    def patch_bytes(self, run: PredecessorRun) -> bytes:
        p = self.file(run.patch)
        return p.read_bytes() if p is not None and p.is_file() else b""

    # -- tasks ------------------------------------------------------------------------------------
    def tasks_dirs(self) -> dict[str, str]:
        p = self.path / TASKS
        return json.loads(p.read_text(encoding="utf-8")) if p.is_file() else {}

    def tasks(self, track: str, tasks_dir: str | Path | None = None) -> dict[str, Task]:
        """The tasks of a track: --tasks-dir, else the one remembered, else the suite's default."""
        if track in self._tasks and tasks_dir is None:
            return self._tasks[track]
        from swe_residual.tracks import suite_dir, tasks_dir_for

        known = self.tasks_dirs()
        chosen = tasks_dir or known.get(track)
        tdir = tasks_dir_for(suite_dir(track), str(chosen) if chosen else None)
        if tdir is None or not tdir.is_dir():
            raise InputError(f"track {track!r}: no tasks dir; pass --tasks-dir PATH")
        if known.get(track) != str(tdir):
            known[track] = str(tdir)
            (self.path / TASKS).write_text(
                json.dumps(known, indent=1, sort_keys=True) + "\n", encoding="utf-8"
            )
        self._tasks[track] = load_tasks(tdir, track)
        return self._tasks[track]

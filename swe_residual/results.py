"""The results contract: one JSON line per finished case in <run-dir>/results.jsonl.

Lines are appended at once (flushed and fsynced, under an advisory lock so xdist workers can share
the file) and never rewritten. Every string is made valid and bounded before it is written
(safe_read.valid_json), so no agent can write a line that does not read back; a line that does
not read anyway (edited by hand, an older writer) is left out and named (path:line) by the
readers, never raised. The run dir also holds manifest.json, the facts offline reports
need (tasks, states, their failing sets and patches), so `swe-residual report` works from the run
dir alone.
"""

from __future__ import annotations

import fcntl
import io
import json
import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import msgspec
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from swe_residual.safe_read import valid_json, valid_text
from swe_residual.structs import reader_struct

RESULTS = "results.jsonl"
MANIFEST = "manifest.json"
RUN_PAGE = "report.html"  # the run page (report/html/run_page.py)
STARTS = ("clean", "residual")  # the protocol's starting conditions (a handoff view adds "+<view>")
SUMMARY = "summary.json"
MAX_TEXT = 100_000  # characters of any one string of a record as written

#: residual+summary / residual+trace: a residual start whose request also shows the predecessor's
#: trajectory (--handoff-view); never mixed with the blind residual start of the paper
Start = Literal["clean", "residual", "residual+summary", "residual+trace"]
VerdictName = Literal["pass", "fail", "infra_error"]
Termination = Literal[
    "submitted", "budget", "cost_limit", "context_exhausted", "storage_limit", "agent_error", "infra"
]
TestStatus = Literal["passed", "failed", "skipped"]


#: the validators of the contract's models are built on first use, not at import: a report that
#: reads every line with msgspec (report/columns.py) never pays for them
_DEFERRED = ConfigDict(defer_build=True)


class Record(BaseModel):
    model_config = _DEFERRED

    case_id: str
    agent: str
    harness: str | None = None
    track: str
    task: str
    start: Start
    state: str | None = None
    predecessor: dict[str, str] | None = None
    attempt: int = 1
    repeat: int = Field(
        default=1, description="which of the case's --repeat K independent runs (1 in older records)"
    )
    outcome: Literal[0, 1] | None = None
    verdict: VerdictName
    tests: dict[str, TestStatus] = Field(default_factory=dict)
    missing_tests: list[str] = Field(default_factory=list)
    declared_complete: bool | None = None
    termination: Termination | None = None
    steps: int | None = None
    prompt_tokens: int | None = Field(
        default=None, description="model tokens of the run, where the harness reports them"
    )
    completion_tokens: int | None = None
    cost_usd: float | None = None
    duration_s: float | None = None
    agent_duration_s: float | None = None
    verify_duration_s: float | None = None
    backend: str | None = None
    host: str | None = Field(default=None, description="the Docker engine the attempt ran on")
    node: str | None = Field(default=None, description="the cluster node the attempt ran on (--cluster)")
    error: str | None = None
    rule: str | None = Field(
        default=None, description="the taxonomy rule that decided the record (docs/errors.md)"
    )
    verdict_note: str | None = None
    integrity: list[str] = Field(
        default_factory=list, description="integrity signals of the final state (swe_residual/integrity/)"
    )
    integrity_notes: list[str] = Field(
        default_factory=list,
        description="integrity notes of the final state: "
        "honest-looking test infrastructure, not counted (integrity/)",
    )
    artifacts: dict[str, str] = Field(default_factory=dict, description="paths relative to the run dir")
    finished_at: float = Field(default_factory=time.time)

    @property
    def valid(self) -> bool:
        """The one definition of a valid outcome: a counted rule gave the run a 0 or 1."""
        return self.outcome is not None and self.verdict != "infra_error" and self.termination != "infra"

    @property
    def normally_submitted(self) -> bool:
        return bool(self.declared_complete) and self.valid


def repeat_suffix(repeat: int) -> str:
    """What a case id adds for its repeat (--repeat K): nothing for the first (the id a run
    without --repeat gives it, so runs with and without repeats line up), "#r<k>" for the k-th
    ('#' is in no agent label, task or state id)."""
    return "" if repeat == 1 else f"#r{repeat}"


def case_of(record: Any) -> str:
    """The case a record is a repeat of: its case id without the repeat's suffix."""
    suffix = repeat_suffix(getattr(record, "repeat", 1) or 1)
    cid = record.case_id
    return cid[: len(cid) - len(suffix)] if suffix and cid.endswith(suffix) else cid


def append_record(run_dir: Path, record: Record | dict[str, Any]) -> None:
    """Append one record to the run's results.jsonl (see append_line)."""
    append_line(Path(run_dir) / RESULTS, record)


def append_line(path: Path, record: BaseModel | dict[str, Any]) -> None:
    """Append one JSON line atomically with respect to other writers and make it durable (see
    append_lines)."""
    append_lines(path, [record])


def append_lines(path: Path, records: Sequence[BaseModel | dict[str, Any]]) -> None:
    """Append JSON lines with one write and one fsync, atomically with respect to other writers
    (under the file lock; all of them or none: never a torn line left behind) and durable. Strings
    are made valid (a lone surrogate from a file name or an agent's output escaped as text) and
    bounded to MAX_TEXT characters; a number that JSON cannot hold (inf, nan) is null, an integer
    beyond 2**63 - 1 (a trajectory's summed token counts: any size an agent claims) is written as
    that bound, a container nested deeper than safe_read.MAX_JSON_DEPTH as a note: no value makes
    the write raise, only the run dir can (RunDirError), so every case keeps its record. Many
    lines per call is what 20,000 Stage II decisions need (one fsync per batch, not per line)."""
    from swe_residual.errors import RunDirError

    if not records:
        return
    data = "".join(
        json.dumps(
            valid_json(r.model_dump(mode="json") if isinstance(r, BaseModel) else r, MAX_TEXT),
            sort_keys=True,
            separators=(",", ":"),
        )
        + "\n"
        for r in records
    ).encode("utf-8")
    path = Path(path)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            size = os.fstat(fd).st_size
            try:
                view = memoryview(data)
                while view:
                    n = os.write(fd, view)
                    if n <= 0:
                        raise OSError(28, "short write (no space left?)")
                    view = view[n:]
                os.fsync(fd)
            except OSError:
                os.ftruncate(fd, size)  # all of them or nothing
                raise
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
    except OSError as exc:
        raise RunDirError(f"cannot write {path}: {exc.strerror or exc}") from None


def iter_records(run_dir: Path, bad: list[str] | None = None, limit: int | None = None) -> Iterator[Record]:
    """Every complete line of a run's results.jsonl (a torn last line from a crash is skipped, and
    blank lines). A line that is not a record is left out and, with `bad`, named there
    ("<path>:<line>: <why>"): readers never raise on a line. `limit`: only the file's first
    `limit` bytes (what an earlier read of the same file saw)."""
    path = Path(run_dir) / RESULTS
    if not path.exists():
        return
    if limit is None:
        fh = open(path, encoding="utf-8", errors="surrogateescape")
    else:
        with open(path, "rb") as raw:
            head = raw.read(limit)
        fh = io.TextIOWrapper(io.BytesIO(head), encoding="utf-8", errors="surrogateescape")
    with fh:
        for n, line in enumerate(fh, 1):
            if not line.endswith("\n"):
                break
            try:
                record = Record.model_validate_json(line)
            except ValueError as exc:
                if line.strip() and bad is not None:
                    bad.append(bad_line(path, n, line, exc))
                continue
            yield record


def bad_line(path: Path, n: int, line: str | bytes, exc: Exception) -> str:
    """One line naming a results line that is not a record, and why."""
    if isinstance(line, bytes):
        line = line.decode("utf-8", "surrogateescape")
    try:
        line.encode("utf-8")
        if isinstance(exc, ValidationError):
            err = exc.errors()[0]
            loc = ".".join(map(str, err["loc"]))
            why = f"{loc}: {err['msg']}" if loc else err["msg"]
        else:
            why = f"{type(exc).__name__}: {exc}"
    except UnicodeEncodeError as enc:
        why = f"not valid UTF-8 (byte {len(line[: enc.start].encode('utf-8', 'surrogateescape'))})"
    return valid_text(f"{path}:{n}: {why}", 500)


# -- reading many records fast (reports) --------------------------------------------------------

#: Record's nested fields: the one struct that reads results lines (RecordRow) keeps them as raw
#: JSON, decoded and validated once per distinct value (report/columns.py)
NESTED = ("tests", "predecessor", "missing_tests", "integrity", "integrity_notes", "artifacts")


def _to_record(self) -> Record:
    return Record.model_validate(msgspec.structs.asdict(self))


#: One results line as msgspec reads it: the fields, types and defaults of Record, derived from it
#: (swe_residual/structs.py), the NESTED fields as raw JSON. The reader (report/columns.py)
#: decodes those once per distinct value; the rows it hands out (RunRecords.rows) hold the decoded
#: values there, so a row reads like a Record (`valid`, `normally_submitted` are Record's own),
#: without a pydantic model per line. A line msgspec does not take as it is is read by Record
#: itself. ROW_STRUCT is the struct as msgspec sees it (its fields, their defaults); RecordRow the
#: same class as its rows read.
ROW_STRUCT = reader_struct(
    Record,
    name="RecordRow",
    raw=NESTED,
    namespace={
        "valid": Record.valid,
        "normally_submitted": Record.normally_submitted,
        "to_record": _to_record,
    },
)

if TYPE_CHECKING:  # a row reads like a Record (the struct above is made at run time)

    class RecordRow(Record):
        def to_record(self) -> Record: ...

else:
    RecordRow = ROW_STRUCT


class RunRecords(Sequence):
    """The records report.load_runs returns: a sequence of Records, built on first access.

    build_report reads `columns` (report/columns.py: the lines decoded into arrays, no object
    per line) while nobody took the rows or the Records; the gates' case checks and the pages read
    `rows`: RecordRows (Records where a line needed pydantic) with the same attributes, made by the
    same decode when load_runs is asked for them (rows=True), else decoded on first access
    (`load_rows`), so a report over 1M lines never pays for 1M objects.
    """

    def __init__(
        self,
        rows: list[RecordRow | Record] | None = None,
        bad_lines: list[str] | None = None,
        *,
        load_rows: Callable[[], list[RecordRow | Record]] | None = None,
        columns: Any = None,
        n: int | None = None,
    ):
        self._rows = rows
        self._load_rows = load_rows
        self._handed = False
        #: the columnar form of the same lines (None: build it from the rows when needed)
        self.columns = columns
        self._n = n
        #: results lines that are not records, one "<path>:<line>: <why>" each (the run is invalid)
        self.bad_lines = bad_lines or []
        self._records: list[Record] | None = None

    @property
    def rows(self) -> list[RecordRow | Record]:
        if self._rows is None:
            self._rows = self._load_rows() if self._load_rows is not None else []
        self._handed = True
        return self._rows

    @rows.setter
    def rows(self, rows: list[RecordRow | Record]) -> None:
        self._rows = rows
        self._handed = True

    @property
    def untouched(self) -> bool:
        """Neither rows nor Records were handed out: `columns` is what they hold."""
        return not self._handed and self._records is None

    def _all(self) -> list[Record]:
        if self._records is None:
            self._records = [r.to_record() if isinstance(r, RecordRow) else r for r in self.rows]
        return self._records

    def __len__(self) -> int:
        if self._rows is not None:
            return len(self._rows)
        if self._n is not None:
            return self._n
        return len(self.rows)

    def __getitem__(self, i):
        return self._all()[i]

    def __iter__(self) -> Iterator[Record]:
        return iter(self._all())

    def __repr__(self) -> str:
        return f"RunRecords({len(self)} records)"


def record_rows(records: Iterable[Record]) -> list[RecordRow | Record]:
    """What the report computes from: load_runs' rows as they are (its Records once someone has
    used them, so edits to them count), any other records as a list."""
    if isinstance(records, RunRecords):
        return records.rows if records._records is None else records._records
    return list(records)


class TaskFacts(BaseModel):
    model_config = _DEFERRED

    track: str
    tests: list[str] = Field(default_factory=list, description="graded test ids")
    solution_files: list[str] = Field(default_factory=list)


class StateFacts(BaseModel):
    model_config = _DEFERRED

    track: str
    task: str
    predecessor: dict[str, str]
    failing_tests: list[str]
    patch: str = Field(description="copy of the state's patch, relative to the run dir")
    changed_files: list[str] = Field(default_factory=list)


class Manifest(BaseModel):
    """Facts about the cases of a run that reports need offline."""

    model_config = _DEFERRED

    cases: list[str] = Field(default_factory=list, description="case ids collected for this run")
    tasks: dict[str, TaskFacts] = Field(default_factory=dict, description="by '<track>/<task>'")
    states: dict[str, StateFacts] = Field(default_factory=dict)

    def merged(self, other: Manifest) -> Manifest:
        """This manifest plus what `other` adds (a resumed run may select more cases)."""
        return Manifest(
            cases=list(dict.fromkeys(self.cases + other.cases)),
            tasks={**self.tasks, **other.tasks},
            states={**self.states, **other.states},
        )

    def write(self, run_dir: Path) -> None:
        tmp = Path(run_dir) / (MANIFEST + ".tmp")
        tmp.write_text(self.model_dump_json(indent=1), encoding="utf-8")
        tmp.replace(Path(run_dir) / MANIFEST)

    @classmethod
    def read(cls, run_dir: Path) -> Manifest:
        path = Path(run_dir) / MANIFEST
        return cls.model_validate_json(path.read_text(encoding="utf-8")) if path.exists() else cls()

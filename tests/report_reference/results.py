"""Today's fast reader of results.jsonl (swe_residual/results.py before the columnar report),
verbatim: RecordRow, read_rows, RunRecords, record_rows. The test oracle of the columnar report
(tests/test_report_columns.py); Record and Manifest are the contract's own classes."""

from __future__ import annotations

import codecs
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Literal

import msgspec

from swe_residual.results import (  # noqa: F401
    RESULTS,
    Record,
    Start,
    Termination,
    TestStatus,
    VerdictName,
    bad_line,
    iter_records,
)

# -- reading many records fast (reports) --------------------------------------------------------


class RecordRow(msgspec.Struct, kw_only=True, gc=False):
    """One results line as msgspec decodes and validates it: the fields, types and defaults of
    Record (tests/test_report.py checks they stay the same), without a pydantic model per line.

    A line msgspec does not accept as it is (pydantic would coerce it, or reject it) is left to
    Record itself, so read_rows gives exactly the values iter_records gives. gc=False: rows
    hold no reference cycles, and 1M of them would otherwise slow every garbage collection.
    """

    case_id: str
    agent: str
    harness: str | None = None
    track: str
    task: str
    start: Start
    state: str | None = None
    predecessor: dict[str, str] | None = None
    attempt: int = 1
    outcome: Literal[0, 1] | None = None
    verdict: VerdictName
    tests: dict[str, TestStatus] = msgspec.field(default_factory=dict)
    missing_tests: list[str] = msgspec.field(default_factory=list)
    declared_complete: bool | None = None
    termination: Termination | None = None
    steps: int | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cost_usd: float | None = None
    duration_s: float | None = None
    agent_duration_s: float | None = None
    verify_duration_s: float | None = None
    backend: str | None = None
    host: str | None = None
    error: str | None = None
    rule: str | None = None
    verdict_note: str | None = None
    integrity: list[str] = msgspec.field(default_factory=list)
    integrity_notes: list[str] = msgspec.field(default_factory=list)
    artifacts: dict[str, str] = msgspec.field(default_factory=dict)
    finished_at: float = msgspec.field(default_factory=time.time)

    valid = Record.valid
    normally_submitted = Record.normally_submitted

    def to_record(self) -> Record:
        return Record.model_validate(msgspec.structs.asdict(self))


_DECODER = msgspec.json.Decoder(RecordRow)
_CHUNK = 1 << 22  # bytes decoded at a time: memory stays bounded by the rows, not the file


class _Shared:
    """Hands out one object per distinct value (strings, and the tests / predecessor dicts, the
    integrity signal and note lists and the empty lists of the rows, which readers never mutate).
    The values repeat across lines: one shared object per distinct value saves ~40% of the memory
    of 1M rows."""

    def __init__(self) -> None:
        self.values: dict = {}

    def row(self, r: RecordRow) -> RecordRow:
        get = self.values.setdefault
        # the repeating string fields (agent, harness, track, task, state, rule, backend) written
        # out: a loop of getattr/setattr over their names costs twice as much; None maps to None
        r.agent = get(r.agent, r.agent)
        r.harness = get(r.harness, r.harness)
        r.track = get(r.track, r.track)
        r.task = get(r.task, r.task)
        r.state = get(r.state, r.state)
        r.rule = get(r.rule, r.rule)
        r.backend = get(r.backend, r.backend)   # termination is a Literal: msgspec shares it
        tests = r.tests
        if tests:
            r.tests = get(("tests", *tests.items()), tests)
        else:
            r.tests = get(("empty", "tests"), tests)
        if r.predecessor:
            r.predecessor = get(("pred", *r.predecessor.items()), r.predecessor)
        if not r.missing_tests:
            r.missing_tests = get(("empty", "missing"), r.missing_tests)
        # flags repeat too ("test-infrastructure: conftest.py"): one list per distinct flag list
        r.integrity = get(("integrity", *r.integrity), r.integrity)
        r.integrity_notes = get(("notes", *r.integrity_notes), r.integrity_notes)
        return r


def read_rows(run_dir: Path, bad: list[str] | None = None) -> list[RecordRow | Record]:
    """Every complete line of results.jsonl, as iter_records reads it (same values, the same lines
    named in `bad`, a torn last line skipped), decoded by msgspec a chunk at a time; lines it does
    not take as they are go through Record.model_validate_json."""
    path = Path(run_dir) / RESULTS
    if not path.exists():
        return []
    rows: list[RecordRow | Record] = []
    shared = _Shared()
    named = len(bad) if bad is not None else 0
    with open(path, "rb") as fh:
        head = fh.read(_CHUNK)
        if head.startswith(codecs.BOM_UTF8):
            return list(iter_records(run_dir, bad))  # text mode keeps the BOM: leave it all to pydantic
        tail = b""
        block = head
        offset = 0  # of this chunk's complete lines in the file
        while block:
            data = tail + block
            if b"\r" in data:  # text mode also ends lines at a lone "\r"
                if bad is not None:
                    del bad[named:]
                return list(iter_records(run_dir, bad))
            end = data.rfind(b"\n") + 1
            lines, tail = data[:end], data[end:]
            rows += map(shared.row, _decode(lines, path, offset, bad))
            offset += end
            block = fh.read(_CHUNK)
    return rows


def _decode(lines: bytes, path: Path, offset: int, bad: list[str] | None) -> list[RecordRow | Record]:
    """Complete lines (from byte `offset` of the file): all at once, else line by line (a blank
    line, a line msgspec rejects; one that pydantic rejects too is named in `bad`)."""
    if not lines:
        return []
    if not lines.startswith(b"\n") and b"\n\n" not in lines:
        try:
            return _DECODER.decode_lines(lines)
        except (msgspec.DecodeError, msgspec.ValidationError):
            pass
    out: list[RecordRow | Record] = []
    before = None  # lines of the file before these: counted only once a line is bad
    for n, line in enumerate(lines.splitlines(keepends=True), 1):
        try:
            out.append(_DECODER.decode(line))
        except (msgspec.DecodeError, msgspec.ValidationError):
            if not line.strip():
                continue
            try:
                out.append(Record.model_validate_json(line.decode("utf-8")))
            except ValueError as exc:  # not UTF-8, not JSON, not a record
                if bad is not None:
                    before = _lines_before(path, offset) if before is None else before
                    bad.append(bad_line(path, before + n, line, exc))
    return out


def _lines_before(path: Path, offset: int) -> int:
    """How many lines the file has before byte `offset` (only to name a bad line: never on the
    fast path)."""
    count = 0
    with open(path, "rb") as fh:
        while offset > 0:
            block = fh.read(min(_CHUNK, offset))
            if not block:
                break
            count += block.count(b"\n")
            offset -= len(block)
    return count


class RunRecords(Sequence):
    """The records report.load_runs returns: a sequence of Records, built on first access.

    build_report and the gates read `rows` instead: RecordRows (Records where a line needed
    pydantic), which have the same attributes, so a report over 1M lines never pays for 1M
    pydantic models.
    """

    def __init__(self, rows: list[RecordRow | Record], bad_lines: list[str] | None = None):
        self.rows = rows
        #: results lines that are not records, one "<path>:<line>: <why>" each (the run is invalid)
        self.bad_lines = bad_lines or []
        self._records: list[Record] | None = None

    def _all(self) -> list[Record]:
        if self._records is None:
            self._records = [r.to_record() if isinstance(r, RecordRow) else r for r in self.rows]
        return self._records

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i):
        return self._all()[i]

    def __iter__(self) -> Iterator[Record]:
        return iter(self._all())

    def __repr__(self) -> str:
        return f"RunRecords({len(self.rows)} records)"


def record_rows(records: Iterable[Record]) -> list[RecordRow | Record]:
    """What the report computes from: load_runs' rows as they are (its Records once someone has
    used them, so edits to them count), any other records as a list."""
    if isinstance(records, RunRecords):
        return records.rows if records._records is None else records._records
    return list(records)

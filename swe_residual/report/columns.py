"""The report's input as columns: results.jsonl decoded into numpy arrays of interned ids, and a
compact manifest.

A report over 1M lines cannot afford an object per line. Each line is decoded by msgspec into a
slim struct (results.RecordRow, derived from Record by swe_residual/structs.py: every field with
its type, so a line is accepted exactly when msgspec's strict reading of Record accepts it) whose
nested values (per-test dict, predecessor, lists, artifacts) stay raw JSON; those repeat across
lines and are decoded and validated once per distinct value. The names (agents, tracks, tasks,
states, rules, ...) become int codes into one list of names, the counts (steps, tokens) integer
arrays. The structs of a 256 KiB chunk are dropped once its columns are taken, so memory holds
the arrays, the names and the distinct nested values only; where the caller reads the records
too (load_columns(rows=True): the end of a run, the gates, compare, the pages) the decoded lines
are kept as the rows, each nested field holding its decoded value: results.jsonl is decoded once.

A line msgspec does not take as it is (a nested value it rejects included) goes through
Record.model_validate_json: coerced, or named in `bad` ("<path>:<line>: <why>"), so the columns
hold exactly the lines iter_records gives (tests/test_report_columns.py). Records already in
memory (a list of Records, load_runs' rows once used) become the same columns through
`columns_of`.

The manifest is decoded the same way into structs derived from Manifest, TaskFacts and
StateFacts (`ManifestView`); the pydantic Manifest is built only when a caller outside the report
asks for it (LoadedManifest).
"""

from __future__ import annotations

import codecs
import gc
import os
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from operator import attrgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np

from swe_residual.report.forked import in_child, may_fork
from swe_residual.report.spend import record_costs
from swe_residual.results import (
    MANIFEST,
    NESTED,
    RESULTS,
    ROW_STRUCT,
    Manifest,
    Record,
    RecordRow,
    RunRecords,
    bad_line,
    iter_records,
    record_rows,
)
from swe_residual.structs import reader_struct

_DECODER = msgspec.json.Decoder(RecordRow)
#: the nested fields: their type in Record, and the raw value of an absent / empty one
_EMPTY = {f.name: f.default for f in msgspec.structs.fields(ROW_STRUCT) if f.name in NESTED}
_NESTED: dict[str, tuple[Any, msgspec.Raw]] = {
    name: (Record.model_fields[name].annotation, _EMPTY[name]) for name in NESTED
}
_LOW = attrgetter("agent", "track", "start", "verdict", "termination", "declared_complete", "outcome", "rule")
_PLACE, _TESTS, _PREDECESSOR = attrgetter("task", "state"), attrgetter("tests"), attrgetter("predecessor")
_SPARSE_FIELDS = ("missing_tests", "integrity", "integrity_notes", "artifacts")  # mostly empty
_SPARSE = attrgetter(*_SPARSE_FIELDS)
_SPARSE_EMPTY = tuple(_NESTED[f][1] for f in _SPARSE_FIELDS)
_INVALID = object()
#: bytes of results.jsonl decoded at a time: small enough that a chunk's decoded lines are still
#: in the CPU cache when their columns are taken (4 MiB chunks read 100k lines ~1.5x slower)
_CHUNK = 1 << 18
#: below this an integer column is int64 with exact sums of up to 2**23 values; beyond, Python ints
_SAFE_INT = 1 << 40


class _Nested:
    """The distinct values of one nested field: code -> decoded value (code 0: the empty one)."""

    def __init__(self, typ: Any, empty: msgspec.Raw):
        self.decoder = msgspec.json.Decoder(typ)
        self.empty = empty
        first = self.decoder.decode(bytes(empty))
        self.index: dict[Any, int] = {bytes(empty): 0}
        self.keys: list[Any] = [bytes(empty)]
        self.values: list[Any] = [first]
        self.invalid: list[int] = []  # codes of the raw values msgspec rejects

    def _add(self, key: Any, value: Any) -> int:
        code = self.index[key] = len(self.values)
        self.keys.append(key)
        self.values.append(value)
        if value is _INVALID:
            self.invalid.append(code)
        return code

    def raw_codes(self, raws: list[msgspec.Raw]) -> np.ndarray:
        """The code of every raw value (decoded when new; _INVALID when msgspec rejects it)."""
        index = self.index
        keys = list(map(bytes, raws))
        for key in dict.fromkeys(keys):
            if key not in index:
                try:
                    value = self.decoder.decode(key)
                except (msgspec.DecodeError, msgspec.ValidationError):
                    value = _INVALID
                self._add(key, value)
        return np.fromiter(map(index.__getitem__, keys), np.int32, len(keys))

    def sparse_codes(self, raws: list[msgspec.Raw]) -> np.ndarray:
        """raw_codes for a field that is mostly empty: only the others are looked at."""
        where = np.flatnonzero(np.fromiter(map(self.empty.__ne__, raws), bool, len(raws)))
        codes = np.zeros(len(raws), np.int32)
        if len(where):
            codes[where] = self.raw_codes([raws[i] for i in where.tolist()])
        return codes

    def value_code(self, value: Any) -> int:
        """The code of a value already decoded (a Record's), keyed by its content."""
        key = ("value", _frozen(value))
        code = self.index.get(key)
        return self._add(key, value) if code is None else code


def _frozen(value: Any) -> Any:
    if isinstance(value, dict):
        return ("dict", *value.items())
    if isinstance(value, list):
        return ("list", *value)
    return value


@contextmanager
def paused_gc() -> Iterator[None]:
    """The cyclic garbage collector paused (and resumed as it was). Reading and tabulating a run
    allocates millions of objects that hold no reference cycles (decoded lines, names, the
    arrays' lists), which refcounting frees; with the collector on, each allocation burst
    triggers collections that traverse every long-lived container (the manifest's 100,000s of
    lists and dicts at 1M records): a third of the time of reading 100k lines, measured. Cycles
    made meanwhile (by anything) are collected once it resumes."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _kinds(values: list) -> tuple[list, np.ndarray]:
    """The distinct values (first-seen order) and each value's index among them."""
    kinds = dict.fromkeys(values)
    index = {k: i for i, k in enumerate(kinds)}
    return list(kinds), np.fromiter(map(index.__getitem__, values), np.int32, len(values))


def _costs(rows: Sequence[Record | RecordRow]) -> np.ndarray:
    """Each record's cost (report/spend.py record_costs), NaN where it is unknown."""
    return record_costs(list(map(_COST, rows)), list(map(_HARNESS, rows)), list(map(_STEPS, rows)))


_COST, _HARNESS, _STEPS = attrgetter("cost_usd"), attrgetter("harness"), attrgetter("steps")


class IntColumn:
    """An integer field that may be None: values (int64, or Python ints beyond _SAFE_INT) and
    where it is present."""

    __slots__ = ("values", "present")

    def __init__(self, values: np.ndarray, present: np.ndarray):
        self.values = values
        self.present = present

    @classmethod
    def of_floats(cls, as_float: np.ndarray) -> IntColumn | None:
        """The column of counts read as floats (None as nan), if every count is below _SAFE_INT
        (so exact); else None."""
        present = ~np.isnan(as_float)
        if not present.any() or np.abs(as_float[present]).max() < _SAFE_INT:
            return cls(np.where(present, as_float, 0.0).astype(np.int64), present)
        return None

    @classmethod
    def of(cls, items: list[int | None]) -> IntColumn:
        try:
            col = cls.of_floats(np.array(items, dtype=np.float64))  # None -> nan
        except OverflowError:
            col = None
        if col is not None:
            return col
        # counts beyond 2**40 (hostile or not): Python ints, exact
        values = np.empty(len(items), dtype=object)
        values[:] = [0 if v is None else v for v in items]
        return cls(values, np.array([v is not None for v in items], bool))

    @classmethod
    def concat(cls, parts: list[IntColumn]) -> IntColumn:
        if not parts:
            return cls(np.zeros(0, np.int64), np.zeros(0, bool))
        dtype = object if any(p.values.dtype == object for p in parts) else np.int64
        return cls(
            np.concatenate([p.values.astype(dtype) for p in parts]),
            np.concatenate([p.present for p in parts]),
        )

    def take(self, idx: np.ndarray) -> IntColumn:
        return IntColumn(self.values[idx], self.present[idx])


class Columns:
    """Every field the report reads, one array per field, one entry per record in file order.

    Names (agent, track, task, state, start, verdict, termination, rule) are codes into `names`
    (which holds None too); outcome and declared_complete are int8 (-1: None); nested values are
    codes into `nested[field]` (its distinct values); `run` is the index of the run dir in
    `bases` (relative artifact paths are made absolute against it when read; -1: as they are).
    """

    FIELDS = (
        "agent",
        "track",
        "task",
        "state",
        "start",
        "verdict",
        "termination",
        "rule",
        "outcome",
        "declared",
        "tests",
        "predecessor",
        "missing_tests",
        "integrity",
        "artifacts",
        "run",
        "cost",
    )

    def __init__(
        self,
        names: list,
        nested: dict[str, list],
        arrays: dict[str, np.ndarray],
        ints: dict[str, IntColumn],
        bases: list[str | None],
    ):
        self.names = names
        self.nested = nested
        self.bases = bases
        self.n = len(arrays["agent"])
        self.agent = arrays["agent"]
        self.track = arrays["track"]
        self.task = arrays["task"]
        self.state = arrays["state"]
        self.start = arrays["start"]
        self.verdict = arrays["verdict"]
        self.termination = arrays["termination"]
        self.rule = arrays["rule"]
        self.outcome = arrays["outcome"]
        self.declared = arrays["declared"]
        self.tests = arrays["tests"]
        self.predecessor = arrays["predecessor"]
        self.missing_tests = arrays["missing_tests"]
        self.integrity = arrays["integrity"]
        self.artifacts = arrays["artifacts"]
        self.run = arrays["run"]
        #: USD per record (report/spend.py record_cost), NaN where it is unknown
        self.cost = arrays["cost"].astype(np.float64)
        self.steps = ints["steps"]
        self.prompt_tokens = ints["prompt_tokens"]
        self.completion_tokens = ints["completion_tokens"]
        self._codes: dict | None = None
        #: Table 3 of these records' Clean and Residual Start runs (report/aggregates.py Success),
        #: kept by the report that computed it: what the gates, compare and the pages read
        self.success: Any = None

    def code(self, name: Any, add: bool = False) -> int:
        """The code of a name (-2 when no record has it: compares unequal to every code; with
        `add`, a new code)."""
        if self._codes is None:
            self._codes = {v: i for i, v in enumerate(self.names)}
        code = self._codes.get(name)
        if code is None:
            if not add:
                return -2
            code = self._codes[name] = len(self.names)
            self.names.append(name)
        return code

    def truthy(self, field: str) -> np.ndarray:
        """Per record: is the nested value non-empty (bool(value))."""
        table = np.fromiter((bool(v) for v in self.nested[field]), bool, len(self.nested[field]))
        return table[getattr(self, field)]

    def family(self) -> np.ndarray:
        """Per record: the code of predecessor["model_family"] where the predecessor has a non-empty
        one, else -1."""
        fams = [
            (v.get("model_family") if v and v is not _INVALID else None) for v in self.nested["predecessor"]
        ]
        table = np.array([self.code(f, add=True) if f else -1 for f in fams], np.int64)
        return table[self.predecessor]

    def artifact_dict(self, i: int, names: Sequence[str] | None = None) -> dict[str, str]:
        """The artifacts of record i (only `names`, if given), paths absolute as load_runs makes them."""
        art = self.nested["artifacts"][self.artifacts[i]]
        if names is not None:
            art = {k: art[k] for k in names if k in art}
        base = self.bases[self.run[i]] if self.run[i] >= 0 else None
        if not art or base is None:
            return dict(art)
        return {k: _absolute(base, p) for k, p in art.items()}


class _Builder:
    """Collects the columns chunk by chunk (interning names and nested values across chunks) and,
    into `rows` (a list), the rows themselves (the decoded lines, their nested values decoded)."""

    def __init__(self, rows: list[RecordRow | Record] | None = None) -> None:
        self.names: list = []
        self.index: dict = {}
        self.nested = {f: _Nested(t, e) for f, (t, e) in _NESTED.items()}
        self.parts: list[dict[str, np.ndarray]] = []
        self.int_parts: dict[str, list[IntColumn]] = {
            "steps": [],
            "prompt_tokens": [],
            "completion_tokens": [],
        }
        self.bases: list[str | None] = []
        #: the rows handed out (RunRecords.rows), made by the same decode: kept when asked for (the
        #: list they go to; None: not kept)
        self.rows = rows

    def codes(self, values: Sequence) -> np.ndarray:
        index, names = self.index, self.names
        for v in dict.fromkeys(values):
            if v not in index:
                index[v] = len(names)
                names.append(v)
        return np.fromiter(map(index.__getitem__, values), np.int32, len(values))

    def add_lines(self, rows: list[RecordRow], run: int) -> bool:
        """Add decoded lines; False (nothing added) when msgspec rejects a nested value of one
        of them (the caller reads them line by line). Each pass over the rows takes several
        fields at once, and values are interned per distinct combination within the chunk."""
        n = len(rows)
        if not n:
            return True
        low, kind = _kinds(list(map(_LOW, rows)))
        table = list(zip(*low))  # per field of _LOW: its value per kind
        part: dict[str, np.ndarray] = {}
        for name, values in zip(("agent", "track", "start", "verdict", "termination"), table):
            part[name] = self.codes(values)[kind]
        part["declared"] = np.array([-1 if v is None else int(v) for v in table[5]], np.int8)[kind]
        part["outcome"] = np.array([-1 if v is None else int(v) for v in table[6]], np.int8)[kind]
        part["rule"] = self.codes(table[7])[kind]
        places, place = _kinds(list(map(_PLACE, rows)))
        tasks, states = zip(*places)
        part["task"] = self.codes(tasks)[place]
        part["state"] = self.codes(states)[place]
        nested = self.nested
        part["tests"] = nested["tests"].raw_codes(list(map(_TESTS, rows)))
        part["predecessor"] = nested["predecessor"].sparse_codes(list(map(_PREDECESSOR, rows)))
        sparse = list(map(_SPARSE, rows))
        where = np.flatnonzero(np.fromiter(map(_SPARSE_EMPTY.__ne__, sparse), bool, n))
        for j, name in enumerate(_SPARSE_FIELDS):
            codes = np.zeros(n, np.int32)
            if len(where):
                codes[where] = nested[name].sparse_codes([sparse[i][j] for i in where.tolist()])
            part[name] = codes
        part["run"] = np.full(n, run, np.int32)
        part["cost"] = _costs(rows)
        for name, nest in nested.items():
            if nest.invalid and np.isin(part[name], nest.invalid).any():
                return False
        self.parts.append(part)
        for name, cols in self.int_parts.items():
            cols.append(IntColumn.of(list(map(attrgetter(name), rows))))
        if self.rows is not None:
            self._keep(rows, part, run, self.rows)
        return True

    def _keep(
        self, rows: list[RecordRow], part: dict[str, np.ndarray], run: int, kept: list[RecordRow | Record]
    ) -> None:
        """The lines as rows, added to `kept`: each nested field holds its decoded value, each name
        field the one string of its name (one object per distinct value, which readers never
        mutate: 29 MiB less at the end of the benchmark's 100k run; artifacts: the line's own dict,
        paths made absolute)."""
        for name, values in (
            *((f, self.names) for f in ("agent", "track", "task", "state", "rule")),
            *((f, self.nested[f].values) for f in NESTED[:-1]),
        ):
            for row, code in zip(rows, part[name].tolist()):
                setattr(row, name, values[code])
        values, base = self.nested["artifacts"].values, self.bases[run] if run >= 0 else None
        for row, code in zip(rows, part["artifacts"].tolist()):
            row.artifacts = _absolute_all(base, values[code])
        kept.extend(rows)

    def mark(self) -> tuple[int, int]:
        return len(self.parts), len(self.rows or ())

    def drop(self, mark: tuple[int, int]) -> None:
        """Forget the parts (and rows) added since `mark`."""
        del self.parts[mark[0] :]
        for cols in self.int_parts.values():
            del cols[mark[0] :]
        if self.rows is not None:
            del self.rows[mark[1] :]

    def add_records(self, records: Iterable[Record | RecordRow], run: int = -1) -> None:
        """Add records already decoded (pydantic Records, RecordRows): the same columns."""
        records = list(records)
        if not records:
            return
        code = self.codes
        part: dict[str, np.ndarray] = {}
        for name in ("agent", "track", "start", "verdict", "termination", "rule", "task", "state"):
            part[name] = code([getattr(r, name) for r in records])
        part["declared"] = np.array(
            [-1 if r.declared_complete is None else int(r.declared_complete) for r in records], np.int8
        )
        part["outcome"] = np.array([-1 if r.outcome is None else int(r.outcome) for r in records], np.int8)
        for name, nest in self.nested.items():
            part[name] = np.array([nest.value_code(getattr(r, name)) for r in records], np.int32)
        part["run"] = np.full(len(records), run, np.int32)
        part["cost"] = _costs(records)
        self.parts.append(part)
        for name in self.int_parts:
            self.int_parts[name].append(IntColumn.of([getattr(r, name) for r in records]))
        if self.rows is not None:  # Records read by pydantic: rows as they are, paths made absolute
            base = self.bases[run] if run >= 0 else None
            for r in records:
                r.artifacts = _absolute_all(base, r.artifacts)
            self.rows.extend(records)

    _NAMED = ("agent", "track", "start", "verdict", "termination", "rule", "task", "state")

    def export(self) -> tuple:
        """What merge() needs of this builder (picklable: a child process sends it)."""
        fields = [*Columns.FIELDS, "integrity_notes"]
        arrays = {
            f: np.concatenate([p[f] for p in self.parts]) if self.parts else np.zeros(0, np.int32)
            for f in fields
        }
        ints = {k: (lambda c: (c.values, c.present))(IntColumn.concat(v)) for k, v in self.int_parts.items()}
        nested = {
            f: (n.keys, [None if v is _INVALID else v for v in n.values], n.invalid)
            for f, n in self.nested.items()
        }
        return self.names, nested, arrays, ints

    def merge(self, exported: tuple, run: int) -> None:
        """Add the lines another builder read (export()), after this one's, codes translated."""
        names, nested, arrays, ints = exported
        if not len(arrays["agent"]):
            return
        remap = self.codes(names)
        part = {f: remap[arrays[f]] for f in self._NAMED}
        for f, (keys, values, invalid) in nested.items():
            nest, skip = self.nested[f], set(invalid)
            table = np.full(len(keys), -1, np.int32)
            for i, (key, value) in enumerate(zip(keys, values)):
                if i not in skip:
                    code = nest.index.get(key)
                    table[i] = code if code is not None else nest._add(key, value)
            part[f] = table[arrays[f]]
        part["outcome"], part["declared"], part["cost"] = (
            arrays["outcome"],
            arrays["declared"],
            arrays["cost"],
        )
        part["run"] = np.full(len(arrays["agent"]), run, np.int32)
        self.parts.append(part)
        for name, (values, present) in ints.items():
            self.int_parts[name].append(IntColumn(values, present))

    def build(self) -> Columns:
        fields = [*Columns.FIELDS, "integrity_notes"]
        if self.parts:
            arrays = {f: np.concatenate([p[f] for p in self.parts]) for f in fields}
        else:
            arrays = {f: np.zeros(0, np.int8 if f in ("outcome", "declared") else np.int32) for f in fields}
        ints = {k: IntColumn.concat(v) for k, v in self.int_parts.items()}
        nested = {f: n.values for f, n in self.nested.items()}
        return Columns(self.names, nested, arrays, ints, self.bases)


def columns_of(records: Iterable[Record | RecordRow]) -> Columns:
    """The columns of records in memory (Records, RecordRows; paths as they are)."""
    b = _Builder()
    b.add_records(records)
    return b.build()


def columns_for(records: Iterable[Record | RecordRow]) -> Columns:
    """What the report computes from: load_runs' own columns while nobody took its rows, else the
    columns of the records as they are now (so edits to them count)."""
    if isinstance(records, RunRecords) and records.columns is not None and records.untouched:
        return records.columns
    return columns_of(record_rows(records))


#: results.jsonl from this size on is read by two processes, where a fork is safe (no other
#: thread in the process) and there are two CPUs: each half into its own columns, merged after
PARALLEL_BYTES = 128 << 20


def _read_file(
    b: _Builder,
    run_dir: Path,
    run: int,
    bad: list[str],
    meanwhile=lambda: None,
    meanwhile_bytes: int = 0,
    limit: int | None = None,
) -> int:
    """Add the lines of one results.jsonl as iter_records reads them (only its first `limit`
    bytes, if given); returns the bytes read (up to its last complete line: where rows read
    later stop). `meanwhile()` runs before the lines are read here (after the fork, when a child
    reads part of them: the more, the more `meanwhile_bytes` of JSON meanwhile() reads)."""
    path = Path(run_dir) / RESULTS
    if not path.exists():
        meanwhile()
        return 0
    named, mark = len(bad), b.mark()
    with open(path, "rb") as fh:
        if fh.read(len(codecs.BOM_UTF8)) == codecs.BOM_UTF8:  # text mode keeps the BOM: all to pydantic
            meanwhile()
            b.add_records(iter_records(run_dir, bad, limit), run)
            return os.path.getsize(path)
        size = os.fstat(fh.fileno()).st_size
        # two processes only for the columns (rows would cross back pickled)
        whole = limit is None and b.rows is None and size >= PARALLEL_BYTES and may_fork()
        split = _split_point(fh, size, meanwhile_bytes) if whole else None
        if split is not None:
            done = _read_parallel(b, fh, path, run, bad, split, meanwhile)
        else:
            meanwhile()
            done = _read_region(b, fh, path, run, bad, 0, limit)
    if done is None:  # text mode also ends lines at a lone "\r": all of it as iter_records reads it
        del bad[named:]
        b.drop(mark)
        b.add_records(iter_records(run_dir, bad, limit), run)
        return os.path.getsize(path)
    return done


def _read_region(
    b: _Builder, fh, path: Path, run: int, bad: list[str], start: int, stop: int | None
) -> int | None:
    """The lines from byte `start` to `stop` (line starts; None: the end of the file), a chunk at
    a time; returns where the last complete line ends, None when the lines hold a lone "\r"."""
    fh.seek(start)
    consumed = start
    tail = b""
    while True:
        want = _CHUNK if stop is None else min(_CHUNK, stop - consumed - len(tail))
        block = fh.read(want) if want > 0 else b""
        if not block:
            return consumed
        data = tail + block if tail else block
        if b"\r" in data:
            return None
        end = data.rfind(b"\n") + 1
        tail = data[end:]
        _chunk(b, data, end, path, consumed, run, bad)
        consumed += end


def _split_point(fh, size: int, other: int = 0) -> int | None:
    """The start of the first line after the point where both processes have as much to do: the
    middle of the file, moved towards its start by half the `other` bytes this one reads
    meanwhile (a manifest byte costs about what a line's byte does, measured at 1M records);
    None: there is no line after it."""
    fh.seek(max(size // 5, (size - other) // 2))
    fh.readline()
    split = fh.tell()
    return split if split < size else None


def _read_parallel(
    b: _Builder, fh, path: Path, run: int, bad: list[str], split: int, meanwhile
) -> int | None:
    """_read_region of the whole file: the lines from `split` on in a forked child (its columns,
    names and nested values sent back pickled), the first ones here meanwhile; then merged in
    file order. A child that fails leaves its half to this process."""

    def second_half() -> tuple:
        child = _Builder()
        child_bad: list[str] = []
        with open(path, "rb") as cfh:
            done = _read_region(child, cfh, path, 0, child_bad, split, None)
        return done, child.export(), child_bad

    wait = in_child(second_half)
    try:
        meanwhile()
        first = _read_region(b, fh, path, run, bad, 0, split)
    finally:
        ok, got = wait()
    if first is None:
        return None
    if not ok:
        return _read_region(b, fh, path, run, bad, split, None)
    done, exported, child_bad = got
    if done is None:
        return None
    b.merge(exported, run)
    bad.extend(child_bad)
    return done


def _chunk(b: _Builder, data: bytes, end: int, path: Path, offset: int, run: int, bad: list[str]) -> None:
    """The complete lines data[:end] (from byte `offset` of the file): all at once, else line by
    line (a blank line, a line msgspec rejects; one that pydantic rejects too is named in `bad`)."""
    if not end:
        return
    try:  # decode_lines skips blank lines, as the line-by-line reading does
        rows = _DECODER.decode_lines(memoryview(data)[:end])
    except (msgspec.DecodeError, msgspec.ValidationError):
        rows = None
    if rows is not None and b.add_lines(rows, run):
        return
    lines = data[:end]
    before = None  # lines of the file before these: counted only once a line is bad
    pending: list[RecordRow] = []
    for n, line in enumerate(lines.splitlines(keepends=True), 1):
        try:
            row = _DECODER.decode(line)
        except (msgspec.DecodeError, msgspec.ValidationError):
            row = None
        if row is not None and _nested_ok(b, row):
            pending.append(row)
            continue
        if not line.strip():
            continue
        try:
            record = Record.model_validate_json(line.decode("utf-8"))
        except ValueError as exc:  # not UTF-8, not JSON, not a record
            before = _lines_before(path, offset) if before is None else before
            bad.append(bad_line(path, before + n, line, exc))
            continue
        b.add_lines(pending, run)
        pending.clear()
        b.add_records([record], run)
    b.add_lines(pending, run)


def _lines_before(path: Path, offset: int) -> int:
    """How many lines the file has before byte `offset` (only to name a bad line: never on the
    fast path)."""
    count = 0
    with open(path, "rb") as fh:
        while offset > 0:
            block = fh.read(min(1 << 22, offset))
            if not block:
                break
            count += block.count(b"\n")
            offset -= len(block)
    return count


def _nested_ok(b: _Builder, row: RecordRow) -> bool:
    """Does msgspec take every nested value of the line?"""
    for name, nest in b.nested.items():
        raw = getattr(row, name)
        if raw == nest.empty:
            continue
        code = nest.index.get(bytes(raw))
        if code is None:
            code = int(nest.raw_codes([raw])[0])
        if nest.values[code] is _INVALID:
            return False
    return True


# -- the manifest -------------------------------------------------------------------------------


if TYPE_CHECKING:  # a view reads like the model (the struct below is made at run time)
    ManifestView = Manifest
else:
    #: Manifest as msgspec reads it (TaskFacts, StateFacts within): what the report reads of it,
    #: without a pydantic object per state; derived from the models (swe_residual/structs.py)
    ManifestView = reader_struct(Manifest)


_MANIFEST = msgspec.json.Decoder(ManifestView)


def _view_of(m: Manifest) -> Any:
    return msgspec.convert(m.model_dump(), ManifestView)


def read_manifest_view(run_dir: Path) -> ManifestView:
    """The run dir's manifest.json, as Manifest.read reads it (a file msgspec does not take as it
    is goes through Manifest.read: its coercions, its errors)."""
    path = Path(run_dir) / MANIFEST
    if not path.exists():
        return ManifestView()
    with open(path, "rb") as fh:
        data = fh.read()
    try:
        return _MANIFEST.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return _view_of(Manifest.read(run_dir))


class LoadedManifest:
    """load_runs' merged manifest: the report reads `view` (its tasks and states; of the case ids
    only their number, `n_cases`: the view holds none); any other use (attributes, methods of
    Manifest) gets the pydantic Manifest, built on first access as load_runs always built it."""

    def __init__(self, view: ManifestView, build, n_cases: int):
        self.view = view
        self.n_cases = n_cases
        self._build = build
        self._model: Manifest | None = None

    @property
    def model(self) -> Manifest:
        if self._model is None:
            self._model = self._build()
        return self._model

    @property
    def untouched(self) -> bool:
        return self._model is None

    @property
    def cases(self) -> list[str]:
        """The case ids (of the model: the view holds none)."""
        return self.model.cases

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("view", "n_cases", "_build", "_model"):
            raise AttributeError(name)
        return getattr(self.model, name)

    def __repr__(self) -> str:
        return f"LoadedManifest({self.n_cases} cases, {len(self.view.states)} states)"


def manifest_facts(manifest: Manifest | LoadedManifest | ManifestView | None) -> Any:
    """What the report computes from: a loaded manifest's view while nobody took its model (so
    edits to the model count), else the manifest itself (same attributes)."""
    if manifest is None:
        return ManifestView()
    if isinstance(manifest, LoadedManifest):
        return manifest.view if manifest.untouched else manifest.model
    return manifest


def case_count(manifest: Manifest | LoadedManifest | None) -> int:
    """How many case ids the manifest names (load_runs' manifest: the distinct ones, counted once)."""
    if isinstance(manifest, LoadedManifest) and manifest.untouched:
        return manifest.n_cases
    return len(manifest_facts(manifest).cases)


def _absolute(base: str, rel: str) -> str:
    return rel if not rel or os.path.isabs(rel) else os.path.join(base, rel)


def _absolute_all(base: str | None, artifacts: dict[str, str]) -> dict[str, str]:
    """A dict of its own with the artifact paths made absolute against `base` (None: as they are)."""
    if base is None or not artifacts:
        return dict(artifacts)
    return {name: _absolute(base, path) for name, path in artifacts.items()}


def _merged_model(bases: list[str]) -> Manifest:
    """The merged pydantic Manifest of the run dirs (first definition wins, patch paths absolute)."""
    merged = Manifest()
    cases: list[str] = []
    for base in bases:
        m = Manifest.read(Path(base))
        cases += m.cases
        for key, task in m.tasks.items():
            merged.tasks.setdefault(key, task)
        for sid, st in m.states.items():
            if sid not in merged.states:
                st.patch = _absolute(base, st.patch)
                merged.states[sid] = st
    merged.cases = list(dict.fromkeys(cases))
    return merged


def load_columns(run_dirs: Iterable[Path | str], rows: bool = False) -> tuple[RunRecords, LoadedManifest]:
    """load_runs: the records of every run dir as columns, with their rows when `rows` (made by
    the same decode; else decoded on first access), and the union of their manifests (first
    definition wins). A results line that is not a record is left out and named in the records'
    `bad_lines`."""
    with paused_gc():
        return _load_columns(run_dirs, rows)


def _load_columns(run_dirs: Iterable[Path | str], keep_rows: bool) -> tuple[RunRecords, LoadedManifest]:
    b = _Builder(rows=[] if keep_rows else None)
    bad: list[str] = []
    views: list[ManifestView] = []
    case_sets: list[set[str]] = []
    limits: list[tuple[str, int]] = []
    for run_dir in run_dirs:
        base = str(Path(run_dir).resolve())

        def manifest(base: str = base) -> None:  # while a child reads part of the lines, if one does
            m = read_manifest_view(Path(base))
            # the report only counts the case ids: one set of them per run dir, not the list
            case_sets.append(set(m.cases))
            m.cases = []
            for st in m.states.values():
                st.patch = _absolute(base, st.patch)
            views.append(m)

        run = len(b.bases)
        b.bases.append(base)
        size = (Path(base) / MANIFEST).stat().st_size if (Path(base) / MANIFEST).is_file() else 0
        limits.append((base, _read_file(b, Path(base), run, bad, manifest, size)))
    n_cases = len(case_sets[0] if len(case_sets) == 1 else set().union(*case_sets))
    case_sets.clear()
    if len(views) == 1:
        view = views.pop()
    else:  # the union, first definition wins
        view = ManifestView()
        for m in views:
            for key, task in m.tasks.items():
                view.tasks.setdefault(key, task)
            for sid, st in m.states.items():
                view.states.setdefault(sid, st)
        del views
    columns = b.build()

    def rows() -> list[RecordRow | Record]:
        """The rows asked for later: the same lines decoded again, up to where the columns stopped."""
        out: list[RecordRow | Record] = []
        again = _Builder(rows=out)
        for base, limit in limits:
            again.bases.append(base)
            _read_file(again, Path(base), len(again.bases) - 1, [], limit=limit)
        return out

    records = RunRecords(b.rows, bad, load_rows=rows, columns=columns, n=columns.n)
    return records, LoadedManifest(view, lambda: _merged_model([base for base, _ in limits]), n_cases)

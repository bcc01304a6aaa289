"""No agent can void a run (issue 22, principle 4) and hostile imported JSON (principle 5).

AGENTS are `command:` agents that leave what used to break the run: a file name that is not
UTF-8 (integrity-flagged, so the flag carries it into the record), an ATIF trajectory with lone
surrogates and a cost JSON cannot hold, a trajectory of the wrong type, one nested 100,000 deep.
tests/test_attack_matrix.py runs them through real suite runs on both backends: every case keeps
its record, every line reads back, and the run ends with its tables, report and gates. Here: a
results.jsonl line that does not read (written by hand: the writer cannot produce one any more)
must be named, left out of every number and make the run invalid (exit 11) - in `swe-residual
report`, `gate` and the suite; the readers line by line; the importers on nested JSON, lone
surrogates and wrong types.
"""

from __future__ import annotations

import json

import msgspec
import pytest

from swe_residual.report.tables import load_runs
from swe_residual.results import RESULTS, Record, RecordRow, iter_records
from swe_residual.trajectory import Trajectory

from .drivers import cli, run_suite, world
from .test_residualize_import import TTL_PATCH, _msa_traj, do_import, write_trial

DEEP = 100_000
RUN = "hostile-run"  # not "run": other tests find their containers by the run dir's name

# An ATIF trajectory whose strings hold lone surrogates (JSON escapes: json.loads makes them lone
# surrogate code points), and a cost of 1e999 (inf) that JSON cannot hold
SURROGATE_ATIF = (
    '{"schema_version": "ATIF-v1.4", "agent": {"name": "hostile\\ud800"}, "steps": ['
    '{"step_id": 1, "source": "agent", "message": "lone \\ud800 high, \\udcff low",'
    ' "tool_calls": [{"tool_call_id": "c1", "function_name": "bash", "arguments": {"command": "echo \\udfff"}}],'
    ' "observation": {"results": [{"source_call_id": "c1", "content": "out \\ud800"}]},'
    ' "metrics": {"prompt_tokens": 5, "completion_tokens": 2, "cost_usd": 1e999}}]}'
)

AGENTS = {
    # a directory b"\xff\xfe" holding conftest.py and pytest.py (pytest.py: a framework-shadow
    # flag names it), a file b"\xfe\xff.py", and bytes that are not UTF-8 on stdout
    "bad-names": "python3 - <<'PY'\nimport os, sys\nd = os.fsdecode(b'\\xff\\xfe')\nos.mkdir(d)\n"
    "open(d + '/conftest.py', 'w').write('x = 1\\n')\nopen(d + '/pytest.py', 'w').write('y = 2\\n')\n"
    "open(os.fsdecode(b'\\xfe\\xff.py'), 'w').write('z = 3\\n')\n"
    "sys.stdout.buffer.write(b'name \\xff\\xfe\\n')\nPY\nls",
    "surrogate-trajectory": f"cat > \"$AGENT_TRAJECTORY\" <<'JSON'\n{SURROGATE_ATIF}\nJSON",
    "list-trajectory": "echo '[1, 2, 3]' > \"$AGENT_TRAJECTORY\"",
    "number-steps": 'echo \'{"schema_version": "ATIF-v1.4", "steps": 5}\' > "$AGENT_TRAJECTORY"',
    "deep-trajectory": f'python3 -c \'print("[" * {DEEP} + "]" * {DEEP})\' > "$AGENT_TRAJECTORY"',
}


def read_rows(run_dir, bad: list[str] | None = None) -> list:
    """The rows load_runs hands out (made by the decode that makes the columns), with the lines
    that are not records named in `bad`."""
    records, _ = load_runs([run_dir], rows=True)
    if bad is not None:
        bad.extend(records.bad_lines)
    return records.rows


@pytest.mark.slow
def test_an_unreadable_line_is_named_left_out_and_makes_the_run_invalid(tmp_path):
    world(tmp_path)
    suite = dict(
        world=tmp_path, run_dir=tmp_path / RUN, backend="local", start="clean", agents=["oracle", "nop"]
    )
    proc = run_suite(**suite, timeout=1200)
    assert proc.returncode == 1, proc.stdout[-3000:]  # nop's clean case fails: a test failure
    run = tmp_path / RUN
    lines = (run / RESULTS).read_bytes().splitlines(keepends=True)
    assert len(lines) == 2
    nop = next(i for i, line in enumerate(lines) if b'"agent":"nop"' in line)
    # by hand: nop's record with a lone surrogate escape (what the writer can no longer write),
    # then a line that is not UTF-8 and one that is JSON but not a record
    lines[nop] = lines[nop].replace(b'"case_id":"nop-calc-clean"', b'"case_id":"nop-calc-clean\\udcff"')
    lines += [b'{"case_id": "\xff"}\n', b"[1, 2]\n"]
    (run / RESULTS).write_bytes(b"".join(lines))
    results = str(run.resolve() / RESULTS)
    # the escape's backslash is 0-based byte `at`, so its last hex digit is 1-based column at + 6
    at = lines[nop].index(b"\\udcff")
    named = [
        f"{results}:{nop + 1}: Invalid JSON: lone leading surrogate in hex escape at line 1 column {at + 6}",
        f"{results}:3: not valid UTF-8 (byte 13)",  # {"case_id": " is 13 bytes
        f"{results}:4: Input should be an object",
    ]
    bad: list[str] = []
    assert [r.agent for r in read_rows(run, bad)] == ["oracle"] and bad == named

    report = cli("report", str(run))
    assert report.returncode == 11, report.stdout + report.stderr
    assert "Table 3 - success by track" in report.stdout  # the other record is reported
    err = [line for line in report.stderr.splitlines() if line.strip()]
    assert err == [f"INVALID RUN (exit 11): unreadable results line, not counted: {named[0]} (+2 more)"]
    as_json = json.loads(cli("report", str(run), "--format", "json").stdout)
    assert as_json["unreadable_lines"] == named
    gate = cli("gate", str(run))
    assert gate.returncode == 11
    assert gate.stdout.splitlines()[0] == f"GATE: unreadable results lines, not counted: {'; '.join(named)}"

    # the suite: --resume reruns nop's case (its only record is unreadable: it has none), the bad
    # lines stay named, the tables and report are written, and the run is invalid
    (run / "report.html").unlink()
    again = run_suite(**suite, resume=True, timeout=1200)
    assert again.returncode == 11, again.stdout[-3000:] + again.stderr[-2000:]
    assert f"GATE: unreadable results lines, not counted: {'; '.join(named)}" in again.stdout
    assert "gates: failed, exit status 11" in again.stdout and "Table 3 - success by track" in again.stdout
    summary = json.loads((run / "summary.json").read_text())
    assert summary["unreadable_lines"] == named and summary["gates"]["status"] == 11
    assert summary["cases"]["missing"] == [] and summary["cases"]["recorded"] == 2
    assert (run / "report.html").is_file()
    assert [r.case_id for r in iter_records(run)] == ["oracle-calc-clean", "nop-calc-clean"]


# -- the readers, line by line ------------------------------------------------------------------

GOOD = (
    b'{"case_id": "%s", "agent": "A", "track": "t", "task": "x", "start": "clean", "verdict": "pass", '
    b'"outcome": 1, "finished_at": 1}\n'
)


def test_readers_name_every_bad_line_and_keep_the_rest(tmp_path, monkeypatch):
    from swe_residual.report import columns

    content = [
        GOOD % b"a",
        b'{"case_id": "b\\ud800", "agent": "A"}\n',  # 2: lone surrogate escape
        b'{"case_id": "c\xff", "agent": "A"}\n',  # 3: not UTF-8
        b"[" * DEEP + b"]" * DEEP + b"\n",  # 4: nested 100,000 deep
        b"\n",
        b"  \n",  # 5, 6: blank: skipped
        GOOD.replace(b'"verdict": "pass"', b'"verdict": 5') % b"d",  # 7: wrong type
        b"{not json\n",  # 8
        GOOD % b"e",
        b'{"torn": "\xff',
    ]  # torn last line: skipped
    (tmp_path / RESULTS).write_bytes(b"".join(content))
    path = tmp_path / RESULTS
    # line 2: {"case_id": "b\ud800" - the escape starts at column 15; after it the parser wants the
    # \u of a low surrogate and finds the closing quote, column 21
    want = [
        f"{path}:2: Invalid JSON: unexpected end of hex escape at line 1 column 21",
        f"{path}:3: not valid UTF-8 (byte 14)",  # {"case_id": "c is 14 bytes
        f"{path}:4: Invalid JSON: recursion limit exceeded",  # pydantic's own depth bound (+ its column)
        f"{path}:7: verdict: Input should be 'pass', 'fail' or 'infra_error'",
        f"{path}:8: Invalid JSON: key must be a string at line 1 column 2",
    ]  # the n of {not

    def same(got: list[str]) -> bool:
        return len(got) == len(want) and all(
            g == w or w.endswith("exceeded") and g.startswith(w + " at line 1") for g, w in zip(got, want)
        )

    for chunk in (1 << 18, 64):  # one chunk, and chunks of 64 bytes: line numbers carry across
        monkeypatch.setattr(columns, "_CHUNK", chunk)
        bad: list[str] = []
        rows = read_rows(tmp_path, bad)
        assert [r.case_id for r in rows] == ["a", "e"] and same(bad), bad
        assert all(isinstance(r, (RecordRow, Record)) for r in rows)
    slow: list[str] = []
    assert [r.case_id for r in iter_records(tmp_path, slow)] == ["a", "e"] and slow == bad
    assert [r.case_id for r in read_rows(tmp_path)] == ["a", "e"]  # no list: left out all the same


def test_the_writer_makes_every_string_valid_and_bounded(tmp_path):
    from swe_residual.results import MAX_TEXT, append_record

    rec = Record(
        case_id="c\udcff\udcfe",
        agent="a\ud800",
        track="t",
        task="x",
        start="clean",
        verdict="fail",
        outcome=0,
        error="e" * (MAX_TEXT + 5),
        integrity=["test-infrastructure: \udcff/conftest.py"],
        tests={"t\udfff": "failed"},
        cost_usd=float("inf"),
        duration_s=float("nan"),
    )
    append_record(tmp_path, rec)
    bad: list[str] = []
    (back,) = read_rows(tmp_path, bad)
    assert bad == []
    assert (back.case_id, back.agent, back.integrity) == (
        "c\\xff\\xfe",
        "a\\ud800",
        ["test-infrastructure: \\xff/conftest.py"],
    )
    # pydantic's JSON dump turns a surrogate in a dict key into U+FFFD itself, one per byte of its
    # UTF-8 form (ED BF BF): valid too
    assert list(back.tests) == ["t\ufffd\ufffd\ufffd"]
    assert (back.cost_usd, back.duration_s) == (None, None)
    assert back.error == "e" * MAX_TEXT + "... [5 characters cut]"


# -- importers ----------------------------------------------------------------------------------


def test_importers_nested_json_surrogates_and_wrong_types_one_line_each(tmp_path):
    job = tmp_path / "job"
    write_trial(job, "ttl-cache__good0001", task_name="ttl-cache", reward=1.0, patch=TTL_PATCH)
    deep = write_trial(job, "ttl-cache__deep0002", task_name="ttl-cache", patch=TTL_PATCH)
    (deep / "result.json").write_bytes(b"[" * DEEP + b"]" * DEEP)
    surro = write_trial(job, "ttl-cache__surr0003", task_name="ttl-cache", patch=TTL_PATCH)
    traj = json.loads((surro / "agent" / "trajectory.json").read_text())
    traj["steps"][1]["message"] = "lone \ud800 and \udcff"  # json.dumps writes them as \ud800 escapes
    traj["steps"][1]["tool_calls"][0]["arguments"]["command"] = "ls \udfff"
    (surro / "agent" / "trajectory.json").write_text(json.dumps(traj))
    listed = write_trial(job, "ttl-cache__list0004", task_name="ttl-cache", patch=TTL_PATCH)
    (listed / "agent" / "trajectory.json").write_text("[1, 2]")
    number = write_trial(job, "ttl-cache__numb0005", task_name="ttl-cache", patch=TTL_PATCH)
    (number / "agent" / "trajectory.json").write_text('{"schema_version": "ATIF-v1.4", "steps": 5}')
    ctrf = write_trial(
        job, "ttl-cache__ctrf0006", task_name="ttl-cache", patch=TTL_PATCH, ctrf={"a": "passed"}
    )
    (ctrf / "verifier" / "ctrf.json").write_bytes(b'{"results": ' + b"[" * DEEP + b"]" * DEEP + b"}")

    wd, counts, lines = do_import(tmp_path / "wd", "harbor", job)
    assert counts == (5, 0, 1), lines
    assert [line for line in lines if "FAILED" in line] == [
        f"  FAILED {deep / 'result.json'}: invalid JSON: nested more than 200 levels deep"
    ]
    runs = {r.source["trial"]: r for r in wd.runs().values()}
    assert sorted(runs) == [
        "ttl-cache__ctrf0006",
        "ttl-cache__good0001",
        "ttl-cache__list0004",
        "ttl-cache__numb0005",
        "ttl-cache__surr0003",
    ]
    # the surrogate trajectory imports with its strings made valid
    s = runs["ttl-cache__surr0003"]
    t = Trajectory.read(wd.file(s.trajectory))
    assert t.steps[0].message == "lone \\ud800 and \\xff" and t.steps[0].actions[0].command == "ls \\udfff"
    # wrong types: the trial imports without a trajectory, the note names the file
    assert runs["ttl-cache__list0004"].trajectory is None
    assert (
        runs["ttl-cache__list0004"]
        .source["notes"]
        .startswith(
            f"{listed / 'agent' / 'trajectory.json'}: a list where the trajectory object belongs; not read"
        )
    )
    assert runs["ttl-cache__numb0005"].trajectory is None
    assert (
        runs["ttl-cache__numb0005"]
        .source["notes"]
        .startswith(
            f"{number / 'agent' / 'trajectory.json'}: steps: the number 5 where a list belongs; trajectory not imported"
        )
    )
    assert (
        runs["ttl-cache__ctrf0006"]
        .source["notes"]
        .startswith(
            f"{ctrf / 'verifier' / 'ctrf.json'}: no per-test statuses: {ctrf / 'verifier' / 'ctrf.json'}: invalid JSON: "
            "nested more than 200 levels deep"
        )
    )
    # nothing half-written: every run dir has its Stage I line, every line reads back
    assert sorted(p.name for p in (tmp_path / "wd" / "runs").iterdir()) == sorted(r.id for r in runs.values())
    for line in (tmp_path / "wd" / "stage1.jsonl").read_bytes().splitlines():
        msgspec.json.decode(line)


def test_swe_bench_and_mini_swe_agent_sources_with_hostile_json(tmp_path):
    out = tmp_path / "msa-run"
    for iid in ("ttl-cache", "semver-prerelease", "rate-limiter-burst"):
        (out / iid).mkdir(parents=True)
    ok = _msa_traj("ttl-cache", "Submitted", TTL_PATCH.decode())
    ok["messages"][4]["content"] = "THOUGHT: submit \ud800"
    (out / "ttl-cache" / "ttl-cache.traj.json").write_text(json.dumps(ok))
    wrong = _msa_traj("semver-prerelease", "Submitted", "")
    wrong["messages"] = 5
    (out / "semver-prerelease" / "semver-prerelease.traj.json").write_text(json.dumps(wrong))
    nested = out / "rate-limiter-burst" / "rate-limiter-burst.traj.json"
    nested.write_text('{"trajectory_format": "mini-swe-agent-1.1", "info": ' + "[" * DEEP + "]" * DEEP + "}")
    wd, counts, lines = do_import(tmp_path / "wd", "mini-swe-agent", out, family="claude")
    assert counts == (1, 0, 2), lines
    assert sorted(line for line in lines if "FAILED" in line) == sorted(
        [
            f"  FAILED {nested}: invalid JSON: nested more than 200 levels deep",
            f"  FAILED {out / 'semver-prerelease' / 'semver-prerelease.traj.json'}: messages: the number 5 where a "
            "list belongs",
        ]
    )
    (run,) = wd.runs().values()
    assert run.final_message == "THOUGHT: submit \\ud800"

    preds = tmp_path / "preds.json"
    preds.write_text("[" * DEEP + "]" * DEEP)
    wd2, counts, lines = do_import(tmp_path / "wd2", "swe-bench", preds, family="claude")
    assert counts == (0, 0, 1) and lines == [
        f"  FAILED {preds}: invalid JSON: nested more than 200 levels deep"
    ]


def test_terminal_bench_results_and_safe_json(tmp_path):
    from swe_residual.errors import InputError
    from swe_residual.safe_read import Unsafe, parse_json, read_json
    from swe_residual.sources.tb1_runs import read_tb1_trial

    trial = tmp_path / "trial"
    trial.mkdir()
    (trial / "results.json").write_text("[" * DEEP + "]" * DEEP)
    with pytest.raises(InputError) as exc:
        read_tb1_trial(trial, {})
    assert str(exc.value) == f"{trial / 'results.json'}: invalid JSON: nested more than 200 levels deep"
    (trial / "results.json").write_text(
        '{"trial_name": "t\\ud800", "task_id": "x\\udcff", "is_resolved": true}'
    )
    t = read_tb1_trial(trial, {})
    assert (t.trial_name, t.task_id) == ("t\\ud800", "x\\xff")
    # the depth bound: 200 levels read, 201 do not; a real surrogate pair stays one character
    nest = parse_json(b"[" * 200 + b"]" * 200, "f")
    for _ in range(199):
        (nest,) = nest
    assert nest == []
    with pytest.raises(Unsafe, match="nested more than 200 levels deep"):
        parse_json(b"[" * 201 + b"]" * 201, "f")
    assert parse_json(b'{"\\udcff": ["\\ud83d\\ude00", "\\ud800"]}', "f") == {
        "\\xff": ["\U0001f600", "\\ud800"]
    }
    (tmp_path / "x.json").write_bytes(b"[" * DEEP)
    with pytest.raises(Unsafe, match="x.json: invalid JSON"):
        read_json(tmp_path, "x.json", 1 << 20)


def test_command_agent_imports_are_not_confused_by_types():
    """import_trajectory names what is wrong; the command agent (agents/command.py) keeps its own step."""
    from swe_residual.sources.trajectories import import_trajectory

    for data, why in (
        ([1, 2], "a list where the trajectory object belongs"),
        ({"schema_version": "ATIF-v1.4", "steps": 5}, "steps: the number 5 where a list belongs"),
        (
            {"trajectory_format": "mini-swe-agent-1", "messages": {"a": 1}},
            "messages: an object where a list belongs",
        ),
    ):
        with pytest.raises(ValueError) as exc:
            import_trajectory(data, "a")
        assert str(exc.value) == why
    # parts of the wrong type inside steps are left out, never raised
    odd = {
        "schema_version": "ATIF-v1.4",
        "agent": "x",
        "steps": [
            5,
            {"source": "agent", "observation": [1], "tool_calls": {"a": 1}, "message": 7},
            {
                "source": "agent",
                "tool_calls": [
                    {
                        "tool_call_id": ["x"],
                        "function_name": "Grep",
                        "arguments": {"output_mode": ["l"], "pattern": "p"},
                    }
                ],
                "observation": {"results": [{"source_call_id": ["x"], "content": [[["deep"]]]}]},
            },
        ],
    }
    traj = import_trajectory(odd, "a")
    assert traj.harness == "atif" and len(traj.steps) == 2 and traj.steps[0].actions == []
    assert traj.steps[1].actions[0].command == "rg -l -e p -- ." and traj.steps[1].actions[0].output == "deep"


def test_rows_share_repeating_flag_lists(tmp_path):
    """The rows hand out one list per distinct signal or note list (readers never mutate them):
    200,000 rows with 2% flagged and 5% noted took 97.6 MB with a list each, 84.6 MB shared."""
    flagged = GOOD.replace(
        b', "finished_at": 1}',
        b', "finished_at": 1, "integrity": ["reflection: a.py"], '
        b'"integrity_notes": ["ignore-rules: .gitignore"]}',
    )
    (tmp_path / RESULTS).write_bytes(GOOD % b"a" + GOOD % b"b" + flagged % b"c" + flagged % b"d")
    a, b, c, d = read_rows(tmp_path)
    assert (a.integrity, a.integrity_notes, c.integrity, c.integrity_notes) == (
        [],
        [],
        ["reflection: a.py"],
        ["ignore-rules: .gitignore"],
    )
    assert a.integrity is b.integrity and a.integrity_notes is b.integrity_notes
    assert c.integrity is d.integrity and c.integrity_notes is d.integrity_notes
    assert a.integrity is not a.integrity_notes and a.missing_tests is not a.integrity_notes

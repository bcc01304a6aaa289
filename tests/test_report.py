"""Loading run dirs, the report JSON and its renderers (md, text, csv, HTML with figures)."""

from __future__ import annotations

import csv
import io
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from swe_residual.report.html.run_page import render_html_fragment
from swe_residual.report.tables import (
    build_report,
    figure_conditional,
    figure_success,
    load_construction,
    load_runs,
    render_csv,
    render_markdown,
    render_text,
    write_outputs,
)
from swe_residual.results import Manifest, Record, StateFacts, TaskFacts, append_record
from swe_residual.trajectory import Action, Trajectory


def rec(agent, task, start, outcome, state=None, track="repo", **kw) -> Record:
    return Record(
        case_id=f"{agent}/{track}/{task}/{start}/{state}",
        agent=agent,
        track=track,
        task=task,
        start=start,
        state=state,
        outcome=outcome,
        verdict="pass" if outcome else "fail",
        declared_complete=True,
        termination="submitted",
        predecessor={"agent": "p", "model_family": "DS"} if state else None,
        **kw,
    )


def make_run(
    run: Path, agent: str, outcomes: dict[str, tuple[int, list[int]]], track="repo", with_artifacts=False
):
    """One run dir: per task a clean outcome and one outcome per state s<i>."""
    run.mkdir(parents=True)
    manifest = Manifest()
    for task, (clean, states) in outcomes.items():
        manifest.tasks[f"{track}/{task}"] = TaskFacts(track=track, tests=["f", "p"], solution_files=["a.py"])
        records = [
            rec(agent, task, "clean", clean, track=track, tests={"f": "passed", "p": "passed"}, steps=10)
        ]
        for i, y in enumerate(states):
            sid = f"{track}-{task}-s{i}"
            (run / "states").mkdir(exist_ok=True)
            (run / "states" / f"{sid}.patch").write_text(
                "diff --git a/a.py b/a.py\n--- a/a.py\n+++ b/a.py\n@@ -1 +1,2 @@\n base\n+pred\n"
            )
            manifest.states[sid] = StateFacts(
                track=track,
                task=task,
                predecessor={"agent": "p", "model_family": "DS"},
                failing_tests=["f"],
                patch=f"states/{sid}.patch",
                changed_files=["a.py"],
            )
            artifacts = {}
            if with_artifacts:
                (run / "artifacts").mkdir(exist_ok=True)
                (run / "artifacts" / f"{agent}-{sid}.patch").write_text(
                    "diff --git a/a.py b/a.py\n--- a/a.py\n+++ b/a.py\n@@ -1 +1,2 @@\n base\n+pred\n"
                )
                t = Trajectory(agent=agent, harness="test")
                t.add_step(actions=[Action(command="git diff", output="")])
                t.write(run / "artifacts" / f"{agent}-{sid}.json")
                artifacts = {
                    "patch": f"artifacts/{agent}-{sid}.patch",
                    "trajectory": f"artifacts/{agent}-{sid}.json",
                }
            records.append(
                rec(
                    agent,
                    task,
                    "residual",
                    y,
                    sid,
                    track=track,
                    steps=5,
                    artifacts=artifacts,
                    tests={"f": "passed" if y else "failed", "p": "passed"},
                )
            )
        for r in records:
            manifest.cases.append(r.case_id)
            append_record(run, r)
    manifest.write(run)
    return run


@pytest.fixture
def two_runs(tmp_path):
    # agent A: t1 clean 1 / [1, 0]; t2 clean 1 / [0]; t3 clean 0 / [0, 0, 1]
    #   Res = (1/2 + 0 + 1/3)/3 = 5/18 = 27.8%;  Clean = 2/3 = 66.7%;  Gap = 100*(12/18 - 5/18) = 38.9
    # agent B: t1 clean 1 / [1, 1]; t2 clean 0 / [1]; t3 clean 1 / [0, 0, 0]
    #   Res = (1 + 1 + 0)/3 = 66.7%;  Clean = 66.7%;  Gap = 0
    a = make_run(
        tmp_path / "runA", "A", {"t1": (1, [1, 0]), "t2": (1, [0]), "t3": (0, [0, 0, 1])}, with_artifacts=True
    )
    b = make_run(tmp_path / "runB", "B", {"t1": (1, [1, 1]), "t2": (0, [1]), "t3": (1, [0, 0, 0])})
    return a, b


def test_load_runs_merges_agents_and_makes_paths_absolute(two_runs):
    a, b = two_runs
    records, manifest = load_runs([a, b])
    assert {r.agent for r in records} == {"A", "B"} and len(records) == 18
    assert len(manifest.cases) == 18
    # both runs define the same state ids: the first definition wins, with an absolute patch path
    assert manifest.states["repo-t1-s0"].patch == str(a.resolve() / "states/repo-t1-s0.patch")
    art = next(r for r in records if r.artifacts)
    assert all(Path(p).is_absolute() and Path(p).exists() for p in art.artifacts.values())


def test_build_report_numbers(two_runs):
    records, manifest = load_runs(two_runs)
    report = build_report(records, manifest, n_boot=300)
    a, b = report["tracks"]["repo"]["A"], report["tracks"]["repo"]["B"]
    assert a["residual"] == pytest.approx(5 / 18) and a["clean"] == pytest.approx(2 / 3)
    assert a["gap"] == pytest.approx(100 * 7 / 18)
    assert b["residual"] == pytest.approx(2 / 3) and b["gap"] == pytest.approx(0.0)
    assert set(a["ci"]) >= {"residual", "clean", "gap", "n_boot", "seed", "level"}
    assert a["ci"]["residual"][0] <= a["residual"] <= a["ci"]["residual"][1]
    assert report["predecessors"]["agents"]["A"]["DS"]["residual"] == pytest.approx(5 / 18)
    assert report["statistics"]["repo"]["residual_states"] == 6
    assert report["construction"]["value"] is None
    ab = report["acceptance_bias"]["repo"]["A"]
    assert ab["gap"] == pytest.approx(a["gap"])
    # A's continuations: failed ones end with F' = {f} = F(S_r) -> same failing 1.0
    assert ab["same_failing"]["value"] == 1.0
    assert ab["inspection_rate"]["value"] == 1.0  # every trajectory ran git diff
    assert report["acceptance_bias"]["repo"]["B"]["inspection_rate"]["value"] is None
    json.dumps(report)  # the report is plain JSON


def test_markdown_one_decimal_and_bold_best_per_track(two_runs):
    report = build_report(*load_runs(two_runs), n_boot=100)
    md = render_markdown(report)
    # A: 27.8 / 66.7 / 38.9 ; B: 66.7 / 66.7 / 0.0 -> B best residual; clean tie -> both bold
    assert "| repo | A | 27.8 | **66.7** | 38.9 |" in md
    assert "| repo | B | **66.7** | **66.7** | 0.0 |" in md
    for title in ("Table 3", "Table 4", "Table 8", "Table 2", "Table 5"):
        assert title in md
    assert "n/a" in md  # e.g. construction and B's missing trajectories


def test_text_and_csv(two_runs):
    report = build_report(*load_runs(two_runs), n_boot=100)
    text = render_text(report)
    assert "Table 3" in text and "66.7*" in text
    rows = list(csv.DictReader(io.StringIO(render_csv(report))))
    assert [(r["track"], r["agent"]) for r in rows] == [("repo", "A"), ("repo", "B")]
    assert float(rows[0]["gap_pts"]) == pytest.approx(100 * 7 / 18)  # unrounded
    assert float(rows[0]["residual_pct"]) == pytest.approx(100 * 5 / 18)


def test_html_fragment_escapes_and_embeds_two_svg_figures(tmp_path):
    evil = "<script>alert(1)</script>"
    run = make_run(tmp_path / "run", evil, {"t1": (1, [0]), "t2": (1, [1])})
    report = build_report(*load_runs([run]), n_boot=50)
    frag = render_html_fragment(report)
    assert "<script>" not in frag and "&lt;script&gt;" in frag
    svgs = re.findall(r"<svg .*?</svg>", frag)
    assert len(svgs) == 2
    for svg in svgs:  # well-formed XML, nothing loaded from anywhere, the agent's name escaped
        root = ET.fromstring(svg)
        assert root.tag == "{http://www.w3.org/2000/svg}svg"
        assert "href" not in svg and "<script" not in svg and "<script>alert(1)" in "".join(root.itertext())
    # Figure 1: one clean bar and one residual bar for the agent, labelled with their values: the
    # agent solved both tasks from the clean start (100.0) and one of two from the residual (50.0)
    texts = [t.text for t in ET.fromstring(figure_success(report)).iter("{http://www.w3.org/2000/svg}text")]
    assert "100.0" in texts and "50.0" in texts
    assert "<b>" in frag  # best per track


def test_figures_absent_without_data():
    report = build_report([], Manifest(), n_boot=10)
    assert figure_success(report) is None and figure_conditional(report) is None
    assert "<svg" not in render_html_fragment(report)


def test_write_outputs(two_runs, tmp_path):
    report = build_report(*load_runs(two_runs), n_boot=50)
    paths = write_outputs(tmp_path / "out", report)
    assert json.loads(paths["summary"].read_text())["tracks"]["repo"]["A"]["n_tasks"] == 3
    assert paths["tables"].read_text().startswith("# SWE-Residual")
    assert len(paths["csv"].read_text().splitlines()) == 3


def test_construction_rows_feed_table5_and_prior_effort(two_runs):
    a, _ = two_runs
    rows = [
        {
            "track": "repo",
            "task": "t1",
            "stage_result": "included",
            "state": "repo-t1-s0",
            "steps": 40,
            "duration_s": 1200,
        },
        {"track": "repo", "task": "t1", "stage_result": "rebuild_failed"},
    ]
    (a / "construction.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    construction = load_construction([a])
    report = build_report(*load_runs([a]), construction=construction, n_boot=10)
    assert report["construction"]["value"]["repo"]["passed_review"] == 2
    assert report["statistics"]["repo"]["prior_steps_median"]["value"] == 40
    md = render_markdown(report)
    assert "| Passed human review | 2 | 2 |" in md


# -- the fast reading path equals the plain one ---------------------------------------------------


def _varied_run(run: Path) -> Path:
    """A run dir whose lines vary every field: optional fields missing, infra records, integrity
    flags, runs not declared complete, lines pydantic has to coerce, unknown keys, trajectories
    (native and ATIF-imported, some unreadable), patches, and a torn last line."""
    import random

    from swe_residual.sources.trajectories import import_trajectory

    rng = random.Random(3)
    run.mkdir(parents=True)
    (run / "artifacts").mkdir()
    manifest = Manifest()
    fams = ["DS", "QW"]
    for track in ("repo", "machine"):
        for t in range(6):
            manifest.tasks[f"{track}/t{t}"] = TaskFacts(
                track=track, tests=["f1", "f2", "p1"] if t % 3 else [], solution_files=["a.py", "lib.py"]
            )
            for k in range(t % 3 + 1):
                sid = f"{track}-t{t}-s{k}"
                (run / f"{sid}.patch").write_text(
                    f"diff --git a/a.py b/a.py\n--- a/a.py\n+++ b/a.py\n@@ -1 +1,3 @@\n base\n+p{k}\n+q\n"
                )
                manifest.states[sid] = StateFacts(
                    track=track,
                    task=f"t{t}",
                    predecessor={"agent": "p", "model_family": fams[k % 2]},
                    failing_tests=["f1", "f2"][: k + 1],
                    patch=f"{sid}.patch",
                    changed_files=["a.py"] if k != 1 else [],
                )
    commands = [
        ("git status", "M a.py"),
        ("cat a.py", "base\np0\n"),
        ("cat lib.py", "lib\n"),
        ("ls", "a.py\n"),
        ("grep -rn q .", "./a.py:3:q\n"),
        ("cat lib.py", "cat: lib.py: No such file or directory"),
        ("python -m pytest -q", "1 failed"),
        ("cd sub && cat ../lib.py", "lib\n"),
    ]
    lines = []
    n = 0
    for agent in ("A", "B", "C"):
        for track in ("repo", "machine"):
            for t in range(6):
                starts = [("clean", None)] + [("residual", f"{track}-t{t}-s{k}") for k in range(t % 3 + 1)]
                for start, sid in starts:
                    n += 1
                    outcome = rng.choice([0, 1, None])
                    rec = {
                        "case_id": f"{agent}/{track}/t{t}/{start}/{sid}",
                        "agent": agent,
                        "track": track,
                        "task": f"t{t}",
                        "start": start,
                        "verdict": {0: "fail", 1: "pass", None: "infra_error"}[outcome],
                    }
                    if sid:
                        rec["state"] = sid
                        if rng.random() < 0.7:
                            rec["predecessor"] = {"agent": "p", "model_family": rng.choice(fams)}
                    if outcome is not None or rng.random() < 0.5:
                        rec["outcome"] = outcome
                    if rng.random() < 0.8:
                        rec["tests"] = {
                            x: rng.choice(["passed", "failed", "skipped"])
                            for x in ("f1", "f2", "p1")
                            if rng.random() < 0.9
                        }
                    if rng.random() < 0.2:
                        rec["missing_tests"] = ["p1"]
                    rec["declared_complete"] = rng.choice([True, True, True, False, None])
                    rec["termination"] = rng.choice(
                        [
                            "submitted",
                            "submitted",
                            "budget",
                            "agent_error",
                            "context_exhausted",
                            "infra" if outcome is None else "submitted",
                        ]
                    )
                    if rng.random() < 0.9:
                        rec["steps"] = rng.randint(1, 60)
                    for f in ("duration_s", "agent_duration_s", "verify_duration_s"):
                        if rng.random() < 0.5:
                            rec[f] = rng.choice([rng.uniform(0, 99), rng.randint(0, 99)])
                    rec["rule"] = rng.choice(
                        [None, "verdict", "budget", "agent_error", "infra_harness", "unknown_rule"]
                    )
                    if rng.random() < 0.2:
                        rec["integrity"] = ["test-infrastructure: conftest.py"]
                    if rng.random() < 0.3:
                        rec["harness"], rec["backend"], rec["error"], rec["verdict_note"] = (
                            "h",
                            "local",
                            "boom",
                            "note",
                        )
                    artifacts = {}
                    if rng.random() < 0.8:
                        traj = Trajectory(agent=agent, harness="test")
                        for c, out in rng.sample(commands, rng.randint(0, 4)):
                            traj.add_step(actions=[Action(command=c, output=out)])
                        if rng.random() < 0.3:  # an ATIF trajectory with editor views
                            traj = import_trajectory(
                                {
                                    "schema_version": "ATIF-v1.4",
                                    "agent": {"name": "claude-code"},
                                    "steps": [
                                        {
                                            "source": "agent",
                                            "tool_calls": [
                                                {
                                                    "tool_call_id": "1",
                                                    "function_name": "Read",
                                                    "arguments": {
                                                        "file_path": rng.choice(["/app/lib.py", "/app/a.py"])
                                                    },
                                                }
                                            ],
                                            "observation": {
                                                "results": [{"source_call_id": "1", "content": "  1 x"}]
                                            },
                                        }
                                    ],
                                },
                                agent,
                            )
                        traj.write(run / "artifacts" / f"{n}.json")
                        artifacts["trajectory"] = f"artifacts/{n}.json"
                        if rng.random() < 0.1:
                            (run / "artifacts" / f"{n}.json").write_text("{not json")
                    if rng.random() < 0.6:
                        (run / "artifacts" / f"{n}.patch").write_text(
                            "diff --git a/lib.py b/lib.py\n--- a/lib.py\n+++ b/lib.py\n@@ -1 +1,2 @@\n lib\n+x\n"
                            if rng.random() < 0.5
                            else "diff --git a/a.py b/a.py\n--- a/a.py\n+++ b/a.py\n@@ -1 +1,2 @@\n base\n+p0\n"
                        )
                        artifacts["patch"] = f"artifacts/{n}.patch"
                    if artifacts or rng.random() < 0.5:
                        rec["artifacts"] = artifacts
                    if rng.random() < 0.1:
                        rec["extra_key"] = {"ignored": True}
                    rec["finished_at"] = rng.choice([1.5, 2])
                    manifest.cases.append(rec["case_id"])
                    line = json.dumps(rec)
                    # lines msgspec leaves to pydantic: coercions, duplicate keys
                    if rng.random() < 0.05 and rec.get("declared_complete") is True:
                        line = line.replace('"declared_complete": true', '"declared_complete": 1')
                    if rng.random() < 0.05 and "steps" in rec:
                        line = line.replace(f'"steps": {rec["steps"]}', f'"steps": "{rec["steps"]}"')
                    if rng.random() < 0.05:
                        line = line[:-1] + ', "attempt": 1, "attempt": 2}'
                    lines.append(line)
    (run / "results.jsonl").write_text("\n".join(lines) + "\n" + '{"case_id": "torn", "agent": "A"')
    manifest.write(run)
    return run


def _plain_records(run: Path) -> list[Record]:
    """Record.model_validate_json per complete line, artifact paths made absolute as load_runs does."""
    records = []
    text = (run / "results.jsonl").read_text()
    for line in text.splitlines(keepends=True):
        if line.endswith("\n"):
            r = Record.model_validate_json(line)
            r.artifacts = {k: str(run.resolve() / v) for k, v in r.artifacts.items()}
            records.append(r)
    return records


def test_fast_path_equals_plain_pydantic_path(tmp_path):
    from swe_residual.report.bias import BiasInputs, inspected, opened_any
    from swe_residual.results import RecordRow

    run = _varied_run(tmp_path / "run")
    plain = _plain_records(run)
    rows, manifest = load_runs([run])
    # every line read to the same values (RecordRow where msgspec took the line, Record where not)
    assert len(rows.rows) == len(plain) == len(manifest.cases)
    assert [r.to_record() if isinstance(r, RecordRow) else r for r in rows.rows] == plain
    assert {type(r) for r in rows.rows} == {RecordRow, Record}  # both kinds of line occur
    assert list(rows) == plain
    # the same report, from rows and from pydantic Records
    manifest_plain = Manifest.read(run)
    for st in manifest_plain.states.values():
        st.patch = str(run.resolve() / st.patch)
    fast = build_report(rows, manifest, n_boot=200)
    slow = build_report(plain, manifest_plain, n_boot=200)
    assert json.dumps(fast, sort_keys=True) == json.dumps(slow, sort_keys=True)
    # trajectories: one scan for both questions == the straightforward inspected() / opened_any()
    # on pydantic Trajectory objects
    inp = BiasInputs(manifest)
    checked = 0
    for r in plain:
        p = r.artifacts.get("trajectory")
        if not p or not r.state:
            continue
        try:
            traj = Trajectory.read(Path(p))
        except ValueError:
            assert inp.trajectory_facts(r) is None
            continue
        pred = inp.predecessor_files(r.state) or set()
        left = inp.solution_files(r.track, r.task) - pred
        assert inp.trajectory_facts(r) == (inspected(traj, pred), opened_any(traj, left))
        checked += 1
    assert checked > 20
    assert fast["acceptance_bias"]["repo"]["A"]["inspection_rate"]["value"] is not None


@pytest.mark.parametrize(
    "content",
    [
        b'{"case_id": "a", "agent": "A", "track": "t", "task": "x", "start": "clean", "verdict": "pass", "finished_at": 1}\n\n',  # blank line
        b'\xef\xbb\xbf{"case_id": "a", "agent": "A", "track": "t", "task": "x", "start": "clean", "verdict": "pass", "finished_at": 1}\n',
        b'{"case_id": "a", "agent": "A", "track": "t", "task": "x", "start": "clean", "verdict": "maybe", "finished_at": 1}\n',
        b'{"case_id": "a", "agent": "A", "track": "t", "task": "x", "start": "clean", "verdict": "pass", "finished_at": 1}\r'
        b'{"case_id": "b", "agent": "A", "track": "t", "task": "x", "start": "clean", "verdict": "pass", "finished_at": 1}\n',
        b'{"case_id": "a", "agent": "A", "track": "t", "task": "x", "start": "clean", "verdict": "pass", "finished_at": 1}\n{"torn": "\xff',
        b'{"case_id": "a\\ud800", "agent": "A", "track": "t", "task": "x", "start": "clean", "verdict": "pass", "finished_at": 1}\n',
        b'{"case_id": "a", "agent": "A", "track": "t", "task": "x", "start": "clean", "verdict": "pass", "outcome": true, '
        b'"duration_s": "1.5", "attempt": 2.0, "finished_at": 3}\n',
    ],
)
def test_rows_read_odd_files_as_iter_records_does(tmp_path, content):
    from swe_residual.results import RecordRow, iter_records

    def read_rows(run_dir):  # the rows of the decode that makes the columns
        return load_runs([run_dir], rows=True)[0].rows

    (tmp_path / "results.jsonl").write_bytes(content)

    def outcome(fn):
        try:
            return [r.to_record() if isinstance(r, RecordRow) else r for r in fn(tmp_path)]
        except Exception as exc:  # noqa: BLE001 - the same error type is the point
            return type(exc)

    assert outcome(read_rows) == outcome(lambda d: list(iter_records(d)))


def test_record_row_mirrors_record():
    from swe_residual.results import RecordRow

    assert RecordRow.__struct_fields__ == tuple(Record.model_fields)


def test_trajectory_view_reads_what_trajectory_reads(tmp_path):
    """read_view (the derived msgspec struct) gives the values Trajectory.read gives: on the varied
    run's trajectories (plain and imported ATIF), on values msgspec must leave to pydantic (an
    integer step index written as a float, a missing optional field, an unknown key) and on files
    neither reads."""
    import msgspec

    from swe_residual.trajectory import TrajectoryView, read_view

    run = _varied_run(tmp_path / "run")
    odd = tmp_path / "odd"
    odd.mkdir()
    base = Trajectory(agent="a", harness="h")
    base.add_step("m", [Action(command="cat a.py", output="x", kind="view", path="a.py", cwd="/app")])
    data = json.loads(base.model_dump_json())
    variants = {
        "plain": data,
        "float-index": {**data, "steps": [{**data["steps"][0], "index": 0.0}]},
        "sparse": {"agent": "a", "harness": "h", "steps": [{"index": 3, "actions": [{"command": "ls"}]}]},
        "unknown-key": {**data, "extra": 1},
        "bad-kind": {**data, "steps": [{**data["steps"][0], "actions": [{"command": "x", "kind": "nope"}]}]},
    }
    for name, value in variants.items():
        (odd / f"{name}.json").write_text(json.dumps(value))
    (odd / "not-json.json").write_text("{not json")
    checked = 0
    for path in sorted([*(run / "artifacts").glob("*.json"), *odd.glob("*.json")]):
        try:
            want = Trajectory.read(path)
        except ValueError as exc:
            with pytest.raises(type(exc)):
                read_view(path)
            continue
        got = read_view(path)
        as_read = msgspec.to_builtins(got) if isinstance(got, TrajectoryView) else got.model_dump()
        assert as_read == want.model_dump(), path
        checked += 1
    assert checked > 30
    assert isinstance(read_view(odd / "plain.json"), TrajectoryView)
    assert isinstance(read_view(odd / "float-index.json"), Trajectory)  # coerced by pydantic

"""`residualize import --format tb-leaderboard`: Terminal-Bench 2's published trials, written by us in
the leaderboard's layout (tests/tb_leaderboard_fixture.py), imported by the real command from a
dir, from the Hugging Face dataset API served on 127.0.0.1 and from a git repository; then Stage
II buckets, Stage IV's refusal of a call no replay can reproduce, and (Docker) states rebuilt from
imported Terminus-2 keystrokes and Claude Code shell calls.
"""

from __future__ import annotations

import json
import threading
import urllib.request
from collections import Counter
from pathlib import Path

import pytest
import yaml

from swe_residual.interactions import read_interactions
from swe_residual.residualize.review_page import make_server
from swe_residual.residualize.workdir import WorkDir
from swe_residual.sources.atif import replayable

from . import drivers
from .tb_leaderboard_fixture import SALES_KEYS, make_git_repo, make_leaderboard, serve

TRACK = ("--track", "terminal_bench")


def cli(*args: str, check: int | None = 0):
    return drivers.cli("residualize", *args, check=check, timeout=600)


def imp(source: str, work: Path, *extra: str, check: int | None = 0):
    return cli("import", "--format", "tb-leaderboard", *TRACK, *extra, source, str(work), check=check)


def runs(work: Path) -> list[dict]:
    return [json.loads(x) for x in (work / "stage1.jsonl").read_text().splitlines()]


def by_trial(work: Path) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for r in runs(work):
        assert r["source"]["trial"] not in out, f"{r['source']['trial']} imported twice"
        out[r["source"]["trial"]] = r
    return out


@pytest.fixture(scope="module")
def board(tmp_path_factory):
    return make_leaderboard(tmp_path_factory.mktemp("lb") / "dataset")


@pytest.fixture(scope="module")
def hostile_board(tmp_path_factory):
    return make_leaderboard(tmp_path_factory.mktemp("lbh") / "dataset", hostile=True)


def test_selection_flags_then_resume_adds_the_rest_once(tmp_path, board):
    work = tmp_path / "work"
    out = imp(str(board.root), work, "--agent", "terminus-2", "--task", "sales-report").stdout
    got = by_trial(work)
    assert sorted(got) == sorted(
        t.trial for t in board.trials if t.agent == "terminus-2" and t.task == "sales-report"
    )
    assert "selected 5 trials (--agent terminus-2, --task sales-report); importing 5" in out
    # a model named without its provider, and a limit: the first 3 of them in index order
    imp(str(board.root), work, "--model", "claude-opus-4-1", "--limit", "3")
    claude = [t.trial for t in board.trials if t.agent == "claude-code"][:3]
    assert set(claude) <= set(by_trial(work)) and len(by_trial(work)) == 8
    # everything: what is there already is skipped, each trial once
    out = imp(str(board.root), work, "-j", "4").stdout
    assert "(8 already imported)" in out and "imported 67 runs, 8 already imported, 0 refused" in out
    assert sorted(by_trial(work)) == sorted(t.trial for t in board.trials)
    out = imp(str(board.root), work).stdout
    assert "imported 0 runs, 75 already imported" in out and len(runs(work)) == 75
    run = by_trial(work)[board.trials[0].trial]
    assert run["source"]["format"] == "tb-leaderboard"
    assert (
        run["source"]["submission"] == "Terminus2__GLM-4.7"
        and run["source"]["agent_display_name"] == "Terminus 2"
    )
    assert run["predecessor"] == {"agent": "terminus-2", "model_family": "glm"}


def test_a_typo_in_agent_model_or_task_names_the_close_match(tmp_path, board):
    work = tmp_path / "work"
    for flag, typo, close in (
        ("--agent", "terminus2", "terminus-2"),
        ("--model", "claude-opus-4.1", "claude-opus-4-1"),
        ("--task", "sales-reports", "sales-report"),
    ):
        r = imp(str(board.root), work, flag, typo, check=2)
        assert f"did you mean {close!r}?" in r.stderr, r.stderr
        assert r.stderr.count("\n") == 1, r.stderr  # one line
    assert not (work / "stage1.jsonl").exists() or not runs(work)


def test_every_trial_lands_in_its_bucket_and_interactions_are_replayable(tmp_path, board):
    work = tmp_path / "work"
    imp(str(board.root), work)
    cli("filter", str(work))
    decisions = {
        json.loads(x)["run"]: json.loads(x)["result"]
        for x in (work / "stage2.jsonl").read_text().splitlines()
    }
    got = {r["source"]["trial"]: decisions[r["id"]] for r in runs(work)}
    assert got == board.expected()
    assert Counter(got.values()) == {
        "candidate": 30,
        "passed": 15,
        "infra_error": 15,
        "not_submitted": 15,
    }
    trials = by_trial(work)
    spec = {t.trial: t for t in board.trials}

    def inputs(trial: str):
        return read_interactions(work / trials[trial]["interactions"])

    # Terminus-2: keystrokes with their durations, in order
    [sales] = [
        t
        for t in spec.values()
        if t.agent == "terminus-2" and t.task == "sales-report" and t.kind == "failed"
    ]
    assert [(i.kind, i.input, i.wait) for i in inputs(sales.trial)] == [("keys", k, d) for k, d in SALES_KEYS]
    # an older Terminus-2 run with only its episode logs: the same keystrokes from response.txt
    [ep] = [
        t
        for t in spec.values()
        if t.agent == "terminus-2" and t.task == "sales-report" and t.kind == "episodes"
    ]
    assert [i.input for i in inputs(ep.trial)][:3] == [k for k, _ in SALES_KEYS]
    # Claude Code: Bash as commands (from the directory its shell was left in), Write as the command
    # that writes the file, Read/Grep/TodoWrite skipped
    [wc] = [
        t
        for t in spec.values()
        if t.agent == "claude-code" and t.task == "wcount-build" and t.kind == "failed"
    ]
    cmds = [i.input for i in inputs(wc.trial)]
    assert [i.kind for i in inputs(wc.trial)] == ["command"] * 4
    assert cmds[0] == "cd /opt/src/wcount && make && make install && wcount Makefile"
    assert "| base64 -d > /opt/src/wcount/wcount.c" in cmds[1]
    assert cmds[3] == "cd /opt/src/wcount && make && ./wcount --unique Makefile"
    # Codex's argv shell call
    [cx] = [t for t in spec.values() if t.agent == "codex" and t.task == "kv-service" and t.kind == "passed"]
    assert [i.input for i in inputs(cx.trial)] == [f"ls /tmp && echo codex-{cx.n} > /tmp/codex-{cx.n}"]


def test_a_call_no_replay_can_reproduce_is_stage_iv_command_replay_failed_naming_its_step(tmp_path, board):
    work = tmp_path / "work"
    imp(str(board.root), work, "--agent", "claude-code", "--task", "kv-service")
    cli("filter", str(work))
    [bad] = [r for r in runs(work) if r["source"].get("unreplayable")]
    assert bad["source"]["unreplayable"] == (
        "trajectory step 3: tool call 'Edit' (a file edit by the agent's own tool) cannot be replayed"
    )
    # the inputs before it are kept for the reviewers; never a state from them
    assert [i.input for i in read_interactions(work / bad["interactions"])] == [
        f"ls -la / && echo claude-{int(bad['source']['trial'][-4:])} > /tmp/claude-{int(bad['source']['trial'][-4:])}"
    ]
    cli("review", str(work))
    # the review page shows what the run typed as a terminal transcript, and where replay stops
    server = make_server(WorkDir(work))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        port = server.server_address[1]
        req = urllib.request.Request(
            f"http://127.0.0.1:{port}/c/{bad['id']}", headers={"Cookie": "swe_residual_reviewer=ana"}
        )
        with urllib.request.urlopen(req, timeout=60) as resp:
            page = resp.read().decode()
    finally:
        server.shutdown()
        server.server_close()
    assert "Terminal transcript clean &rarr; candidate (1 inputs" in page and "Diff clean" not in page
    assert "$ ls -la / &amp;&amp; echo claude-" in page
    assert "Not replayable, so never built: trajectory step 3: tool call &#x27;Edit&#x27;" in page
    for reviewer in ("ana", "ben"):
        cli(
            "review",
            "--reviewer",
            reviewer,
            "--candidate",
            bad["id"],
            "--task-directed",
            "yes",
            "--consistent",
            "yes",
            str(work),
        )
    out = cli("build", str(work)).stdout
    [outcome] = [json.loads(x) for x in (work / "stage4.jsonl").read_text().splitlines()]
    assert outcome["result"] == "rebuild_failed"
    assert outcome["detail"] == "command replay failed: " + bad["source"]["unreplayable"]
    assert "command replay failed: trajectory step 3" in out
    status = json.loads(cli("status", "--format", "json", str(work)).stdout)
    assert status["by_stage_result"]["rebuild_failed"] == 1


def test_replayable_stops_at_the_first_unreplayable_call():
    """Keys sent to a running program, an unknown tool: each named; a Write of a whole file is
    replayed byte for byte."""
    atif = {
        "schema_version": "ATIF-v1.4",
        "steps": [
            {"step_id": 1, "source": "user", "message": "go"},
            {
                "step_id": 2,
                "source": "agent",
                "tool_calls": [
                    {
                        "function_name": "str_replace_based_edit_tool",
                        "arguments": {"command": "create", "path": "/a b", "file_text": "x'\n"},
                    },
                    {"function_name": "execute_bash", "arguments": {"command": "cat", "is_input": "true"}},
                ],
            },
        ],
    }
    got = replayable(atif)
    assert [i.input for i in got.inputs] == [
        "mkdir -p -- \"$(dirname -- '/a b')\" && printf %s eCcK | base64 -d > '/a b'"
    ]
    assert (
        got.unreplayable
        == "trajectory step 2: tool call 'execute_bash' (keys sent to a running program) cannot be replayed"
    )
    atif["steps"][1]["tool_calls"] = [
        {"function_name": "python_exec", "arguments": {"code": "open('/x','w')"}}
    ]
    assert replayable(atif).unreplayable == (
        "trajectory step 2: tool call 'python_exec' (a tool no shell can replay) cannot be replayed"
    )


def test_hostile_entries_are_refused_one_line_each_and_the_rest_imports(tmp_path, hostile_board):
    work = tmp_path / "work"
    r = imp(str(hostile_board.root), work, check=1)
    text = r.stdout + r.stderr
    lines = text.splitlines()
    for what, path in hostile_board.hostile.items():
        hits = [ln for ln in lines if path in ln]
        if what == "huge keystrokes":  # imported, and refused by Stage IV (below)
            continue
        if what == "task name traversal":
            assert (
                "task '../../../etc' is not a task of track 'terminal_bench': 1 trials not imported" in text
            )
            continue
        assert len(hits) == 1, (what, hits)
    assert "Evil__Model/metadata.yaml: YAML anchors or aliases; not read" in text
    assert "result.json: invalid JSON: nested too deep" in text and "over the 16 MiB bound" in text
    assert "config.json: not a regular file; not read" in text
    assert not any("Traceback" in ln for ln in lines)
    # every good trial is there, and the two hostile ones that are still trials
    assert sorted(by_trial(work)) == sorted(t.trial for t in hostile_board.trials)
    cli("filter", str(work))
    decisions = {
        json.loads(x)["run"]: json.loads(x)["result"]
        for x in (work / "stage2.jsonl").read_text().splitlines()
    }
    assert {r["source"]["trial"]: decisions[r["id"]] for r in runs(work)} == hostile_board.expected()
    [long_] = [r for r in runs(work) if r["source"]["trial"].endswith("0907")]
    assert "has an argument of 1048582 characters" in long_["source"]["unreplayable"]
    # nothing was followed out of the tree: no run keeps /etc/passwd
    assert not any(b"root:x:0:0" in p.read_bytes() for p in work.rglob("*") if p.is_file())


def test_over_http_only_the_selected_trials_files_are_fetched_and_a_rerun_fetches_nothing(tmp_path, board):
    work, local = tmp_path / "work", tmp_path / "local"
    with serve(board.root) as srv:
        out = imp(srv.dataset_url, work, "--agent", "codex", "-j", "4").stdout
        asked = list(srv.requests)
        out2 = imp(srv.dataset_url, work, "--agent", "codex").stdout
        again = srv.requests[len(asked) :]
    imp(str(board.root), local, "--agent", "codex")
    assert {r["id"] for r in runs(work)} == {r["id"] for r in runs(local)}  # same runs, same ids
    strip = lambda rs: {r["id"]: (r["verdict"], r["tests"], r["termination"]) for r in rs}  # noqa: E731
    assert strip(runs(work)) == strip(runs(local))
    fetched = [
        p
        for p in asked
        if "/resolve/" in p and not p.endswith(("config.json", "result.json", "metadata.yaml"))
    ]
    assert fetched and all("/Codex-CLI__GPT-5/" in p for p in fetched)
    assert sum("/agent/trajectory.json" in p for p in asked) == 25
    assert any("&cursor=" in p for p in asked)  # a job's listing came in pages (Link: rel="next")
    assert "imported 25 runs" in out and "imported 0 runs, 25 already imported" in out2
    assert not any("/agent/trajectory.json" in p for p in again)
    for r in runs(work):
        assert (work / r["interactions"]).is_file()


def test_a_git_url_is_read_from_a_blobless_clone(tmp_path, board):
    url = make_git_repo(board.root, tmp_path / "git")
    work = tmp_path / "work"
    out = imp(url, work, "--agent", "terminus-2", "--task", "kv-service").stdout
    assert "imported 5 runs" in out
    local = tmp_path / "local"
    imp(str(board.root), local, "--agent", "terminus-2", "--task", "kv-service")
    assert sorted(r["id"] for r in runs(work)) == sorted(r["id"] for r in runs(local))


@pytest.mark.docker
def test_imported_keystrokes_and_shell_calls_rebuild_states_that_validate(
    tmp_path, board, docker_client, bookworm_image
):
    """filter -> two reviews -> build on Docker: a Terminus-2 sales-report run (keystrokes) and a
    Claude Code wcount-build run (Bash and Write calls) become states with the recorded failures."""
    work = tmp_path / "work"
    imp(
        str(board.root),
        work,
        "--task",
        "sales-report",
        "--task",
        "wcount-build",
        "--agent",
        "terminus-2",
        "--agent",
        "claude-code",
    )
    cli("filter", str(work))
    spec = {t.trial: t for t in board.trials}
    wanted = {
        r["id"]: r
        for r in runs(work)
        if spec[r["source"]["trial"]].kind == "failed"
        and (r["task"], r["predecessor"]["agent"])
        in (("sales-report", "terminus-2"), ("wcount-build", "claude-code"))
    }
    assert len(wanted) == 2
    cli("review", str(work))
    for cand in wanted:
        for reviewer in ("ana", "ben"):
            cli(
                "review",
                "--reviewer",
                reviewer,
                "--candidate",
                cand,
                "--task-directed",
                "yes",
                "--consistent",
                "yes",
                str(work),
            )
    out_states = work / "out" / "states.yaml"
    r = drivers.cli(
        "residualize", "build", "-j", "2", "--states", str(out_states), str(work), check=0, timeout=1800
    )
    states = {s["task"]: s for s in yaml.safe_load(out_states.read_text())["states"]}
    assert states["sales-report"]["initial_verdict"]["failing_tests"] == [
        "test_outputs.test_every_input_file_is_listed",
        "test_outputs.test_region_totals",
        "test_outputs.test_row_count",
    ]
    assert states["wcount-build"]["initial_verdict"]["failing_tests"] == [
        "test_outputs.test_unique_counts_distinct_words",
        "test_outputs.test_unique_reads_stdin_and_ignores_case",
    ]
    assert "stage IV timings (2 candidates" in r.stdout
    v = drivers.cli(
        "validate", "--track", "terminal_bench", "--states", str(out_states), check=0, timeout=1800
    )
    assert "FAIL" not in v.stdout


def test_a_trial_copied_into_a_second_job_is_imported_once(tmp_path, board):
    """Ids are the trial's own id: the same trial under two jobs (a re-uploaded job) is one run."""
    import shutil

    root = tmp_path / "dataset"
    shutil.copytree(board.root, root)
    sub = root / "submissions" / "terminal-bench" / "2.0" / "Codex-CLI__GPT-5"
    [job] = [d for d in sub.iterdir() if d.is_dir()]
    trial = board.trials[-1].trial
    (sub / "2025-12-24__00-00-00").mkdir()
    shutil.copytree(job / trial, sub / "2025-12-24__00-00-00" / trial)
    work = tmp_path / "work"
    out = imp(str(root), work, "--agent", "codex").stdout
    assert "imported 25 runs, 1 already imported" in out
    assert len(runs(work)) == 25 and len({r["id"] for r in runs(work)}) == 25

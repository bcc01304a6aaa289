"""Residualization on the machine track: Terminal-Bench 1 run dirs and Harbor trials of a Terminus
agent imported as Stage I runs with interactions, Stage II buckets for machine runs, and Stage IV
rebuilding an imported run into a state by replay and snapshot (Docker).

Inputs are written here in the published layouts (Terminal-Bench 1's `tb run` output: run dir,
run_metadata.json, <task>/<trial>/results.json and commands.txt with one Python repr per line;
Harbor's trial dir with an ATIF trajectory of Terminus-2 bash_command tool calls). The tasks are
the bundled terminal_bench ones.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from swe_residual.interactions import read_interactions
from swe_residual.residualize.filter import run_filter
from swe_residual.residualize.importers import import_runs
from swe_residual.residualize.workdir import WorkDir
from swe_residual.sources.endings import tb1_ending

from . import drivers

ROOT = Path(__file__).resolve().parent.parent
TB = ROOT / "suites" / "terminal_bench" / "tasks"
SALES_KEYS = [
    "'ls -R /data/incoming\\n'",
    "['python3 /opt/jobs/summarize.py --out /data/out/summary.json /data/incoming/*.csv', 'Enter']",
    "['cat /data/out/summary.json', 'Enter']",
]
SALES_TESTS = {
    "test_outputs.test_report_exists": "passed",
    "test_outputs.test_report_has_the_fields": "passed",
    "test_outputs.test_amounts_are_rounded_to_cents": "passed",
    "test_outputs.test_every_input_file_is_listed": "failed",
    "test_outputs.test_row_count": "failed",
    "test_outputs.test_region_totals": "failed",
}


def tb1_trial(
    run: Path,
    task: str,
    trial: str,
    *,
    resolved: bool | None,
    mode: str = "none",
    keys: list[str] | None = None,
    tests: dict | None = None,
) -> dict:
    d = run / task / trial
    (d / "panes").mkdir(parents=True)
    (d / "sessions").mkdir()
    result = {
        "id": f"6f1e{abs(hash(trial)) % 10**8:08d}-0000-4000-8000-000000000000",
        "trial_name": trial,
        "task_id": task,
        "instruction": "...",
        "is_resolved": resolved,
        "failure_mode": mode,
        "parser_results": tests,
        "recording_path": f"{task}/{trial}/sessions/agent.cast",
        "total_input_tokens": 900,
        "total_output_tokens": 90,
        "trial_started_at": "2025-06-01T10:00:00.000000+00:00",
        "trial_ended_at": "2025-06-01T10:09:00+00:00",
        "agent_started_at": "2025-06-01T10:01:00+00:00",
        "agent_ended_at": "2025-06-01T10:05:30+00:00",
        "test_started_at": None,
        "test_ended_at": None,
    }
    (d / "results.json").write_text(json.dumps(result, indent=4))
    if keys is not None:
        (d / "commands.txt").write_text("".join(k + "\n" for k in keys))
    (d / "panes" / "post-agent.txt").write_text("root@box:/# \n")
    return result


@pytest.fixture
def tb1_run(tmp_path) -> Path:
    run = tmp_path / "2025-06-01__10-00-00"
    trials = [
        tb1_trial(
            run, "sales-report", "sales-report.1-of-2", resolved=False, keys=SALES_KEYS, tests=SALES_TESTS
        ),
        # the same keys again: the same change, a duplicate
        tb1_trial(
            run, "sales-report", "sales-report.2-of-2", resolved=False, keys=SALES_KEYS, tests=SALES_TESTS
        ),
        tb1_trial(
            run,
            "vm-console",
            "vm-console.1-of-1",
            resolved=False,
            mode="agent_timeout",
            keys=["['python3 /opt/emu/emu.py -m 512', 'Enter']"],
            tests={"test_outputs.test_guest_is_web01": "failed"},
        ),
        tb1_trial(
            run, "kv-service", "kv-service.1-of-1", resolved=None, mode="test_timeout", keys=["'ls\\n'"]
        ),
        tb1_trial(
            run,
            "wcount-build",
            "wcount-build.1-of-1",
            resolved=True,
            keys=["['make install', 'Enter']"],
            tests={"test_outputs.test_installed_and_executable": "passed"},
        ),
    ]
    meta = {
        "run_id": run.name,
        "uuid": "u",
        "dataset_path": "tasks",
        "output_path": str(run.parent),
        "agent_name": "terminus",
        "no_rebuild": False,
        "cleanup": True,
        "log_level": 20,
        "model_name": "openrouter/qwen/qwen3-coder",
        "n_attempts": 1,
    }
    (run / "run_metadata.json").write_text(json.dumps(meta, indent=4))
    (run / "results.json").write_text(json.dumps({"id": "r", "results": trials}, indent=4))
    return run


def terminus_trial(job: Path, folder: str) -> Path:
    """A Harbor trial dir of Terminus-2 on kv-service: ATIF with bash_command keystrokes."""
    d = job / folder
    (d / "agent").mkdir(parents=True)
    (d / "verifier").mkdir()
    config = {"task": {"path": "tasks/kv-service"}, "trial_name": folder, "agent": {"name": "terminus-2"}}
    result = {
        "id": "11111111-2222-4333-8444-555555555555",
        "task_name": "kv-service",
        "trial_name": folder,
        "config": config,
        "agent_info": {
            "name": "terminus-2",
            "version": "2.0",
            "model_info": {"name": "glm-4.6", "provider": "zai"},
        },
        "verifier_result": {"rewards": {"reward": 0.0}},
        "exception_info": None,
        "started_at": "2025-11-03T15:00:00Z",
        "finished_at": "2025-11-03T15:12:00Z",
        "agent_execution": {"started_at": "2025-11-03T15:01:00Z", "finished_at": "2025-11-03T15:04:00Z"},
    }
    (d / "result.json").write_text(json.dumps(result))
    (d / "config.json").write_text(json.dumps(config))
    (d / "verifier" / "reward.txt").write_text("0\n")
    (d / "verifier" / "ctrf.json").write_text(
        json.dumps(
            {
                "results": {
                    "tool": {"name": "pytest"},
                    "tests": [
                        {"name": "test_outputs.test_data_dir_configured", "status": "failed"},
                        {"name": "test_outputs.test_health_on_port_7070", "status": "passed"},
                    ],
                }
            }
        )
    )
    call = lambda i, k, w: {
        "tool_call_id": f"call_{i}",
        "function_name": "bash_command",
        "arguments": {"keystrokes": k, "duration": w},
    }
    steps = [
        {"step_id": 1, "source": "system", "message": "task"},
        {
            "step_id": 2,
            "source": "agent",
            "message": "{...}",
            "tool_calls": [
                call(1, "sed -i 's/^port = 8000$/port = 7070/' /etc/kvstore/kvstore.conf\n", 0.1),
                call(
                    2,
                    "nohup python3 /opt/kvstore/kvstore.py --config /etc/kvstore/kvstore.conf > "
                    "/var/log/kvstore.log 2>&1 &\n",
                    1.0,
                ),
            ],
            "observation": {"results": [{"content": "New Terminal Output:\n[1] 41"}]},
        },
        {
            "step_id": 3,
            "source": "agent",
            "message": "{...}",
            "tool_calls": [
                {"tool_call_id": "call_3", "function_name": "mark_task_complete", "arguments": {}}
            ],
            "observation": {"results": [{"content": "Are you sure?"}]},
        },
    ]
    (d / "agent" / "trajectory.json").write_text(
        json.dumps({"schema_version": "ATIF-v1.5", "steps": steps, "agent": {"name": "terminus-2"}})
    )
    return d


def imported(work: Path, fmt: str, *sources) -> tuple[WorkDir, tuple, list[str]]:
    wd = WorkDir(work, create=True)
    lines: list[str] = []
    counts = import_runs(
        wd, fmt, [str(s) for s in sources], "terminal_bench", str(TB), None, out=lines.append
    )
    return wd, counts, lines


def test_terminal_bench_1_runs_import_with_their_keystrokes_and_land_in_their_buckets(tmp_path, tb1_run):
    wd, counts, lines = imported(tmp_path / "work", "terminal-bench-1", tb1_run)
    assert counts == (5, 0, 0), lines
    runs = {r.source["trial"]: r for r in wd.runs().values()}
    sales = runs["sales-report.1-of-2"]
    assert (sales.task, sales.verdict, sales.outcome, sales.declared_complete, sales.rule) == (
        "sales-report",
        "fail",
        0,
        True,
        "verdict",
    )
    assert sales.predecessor.model_dump() == {"agent": "terminus", "model_family": "qwen"}
    assert sales.tests == SALES_TESTS and sales.duration_s == 270.0  # 10:01:00 -> 10:05:30
    keys = read_interactions(wd.file(sales.interactions))
    # the repr lines, 'Enter' folded into the text it follows; no wait was recorded
    assert [(k.kind, k.input, k.wait) for k in keys] == [
        ("keys", "ls -R /data/incoming\n", None),
        ("keys", "python3 /opt/jobs/summarize.py --out /data/out/summary.json /data/incoming/*.csv\n", None),
        ("keys", "cat /data/out/summary.json\n", None),
    ]
    assert (wd.run_dir(sales.id) / "source" / "results.json").is_file()
    assert (runs["kv-service.1-of-1"].verdict, runs["kv-service.1-of-1"].rule) == (
        "infra_error",
        "infra_verifier",
    )
    assert (runs["vm-console.1-of-1"].termination, runs["vm-console.1-of-1"].outcome) == ("budget", 0)
    run_filter(wd)
    decided = {
        runs_by_id.source["trial"]: d.result
        for d in wd.decisions().values()
        for runs_by_id in [wd.runs()[d.run]]
    }
    assert decided == {
        "sales-report.1-of-2": "candidate",
        "sales-report.2-of-2": "duplicate",
        "vm-console.1-of-1": "not_submitted",
        "kv-service.1-of-1": "infra_error",
        "wcount-build.1-of-1": "passed",
    }
    # importing again adds nothing
    assert imported(tmp_path / "work", "terminal-bench-1", tb1_run)[1] == (0, 5, 0)


def test_hostile_or_broken_tb1_trials_fail_alone_in_one_line(tmp_path, tb1_run):
    bad = tb1_run / "sales-report" / "sales-report.1-of-2" / "commands.txt"
    bad.write_text("'ls\\n'\n__import__('os').system('touch /tmp/pwned')\n")
    (tb1_run / "wcount-build" / "wcount-build.1-of-1" / "results.json").write_text('{"trial_name": "x"}')
    _, counts, lines = imported(tmp_path / "work", "terminal-bench-1", tb1_run)
    assert counts == (3, 0, 2)
    failed = [line.strip() for line in lines if "FAILED" in line]
    assert failed == [
        f"FAILED {bad}:2: not a Python string or list of strings",
        f"FAILED {tb1_run / 'wcount-build' / 'wcount-build.1-of-1' / 'results.json'}: task_id: missing",
    ]
    assert not Path("/tmp/pwned").exists()
    with pytest.raises(Exception, match="neither a Terminal-Bench 1 trial dir"):
        from swe_residual.sources.tb1_runs import tb1_trial_dirs

        tb1_trial_dirs(tmp_path)


def test_a_harbor_trial_of_terminus_on_a_machine_task_keeps_its_keystrokes_and_waits(tmp_path):
    trial = terminus_trial(tmp_path / "job", "kv-service__x1")
    wd, counts, lines = imported(tmp_path / "work", "harbor", trial)
    assert counts == (1, 0, 0), lines
    [run] = wd.runs().values()
    assert (run.patch, run.verdict, run.predecessor.model_family) == (None, "fail", "glm")
    keys = read_interactions(wd.file(run.interactions))
    assert [(k.input.split()[0], k.wait) for k in keys] == [("sed", 0.1), ("nohup", 1.0)]
    assert keys[1].output_sha256 is not None and keys[0].output_sha256 is None
    run_filter(wd)
    assert [d.result for d in wd.decisions().values()] == ["candidate"]


def test_tb1_failure_modes():
    assert (tb1_ending("none").termination, tb1_ending("none").rule) == ("submitted", None)
    assert tb1_ending("agent_timeout").rule == "budget"
    assert tb1_ending("context_length_exceeded").rule == "context_exhausted"
    assert tb1_ending("fatal_llm_parse_error").rule == "agent_error"
    assert (tb1_ending("test_timeout").termination, tb1_ending("test_timeout").rule) == (
        "submitted",
        "infra_verifier",
    )
    assert tb1_ending("something new").rule == "infra_harness"


@pytest.mark.docker
def test_stage_iv_rebuilds_an_imported_tb1_run_into_a_machine_state(
    tmp_path, tb1_run, docker_client, bookworm_image
):
    work = tmp_path / "work"

    def cli(*args):
        return drivers.cli("residualize", *args, check=0, timeout=1200).stdout

    cli("import", "--format", "terminal-bench-1", "--track", "terminal_bench", str(tb1_run), str(work))
    cli("filter", str(work))
    status = json.loads(cli("status", "--format", "json", str(work)))
    [cand] = [c["id"] for c in status["candidates"]]
    cli("review", str(work))  # writes the review packets
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
    packet = json.loads(next((work / "packets").rglob("packet.json")).read_text())
    assert packet["diff"].splitlines()[1] == (
        'keys: "python3 /opt/jobs/summarize.py --out /data/out/summary.json '
        '/data/incoming/*.csv\\n"  (wait until idle)'
    )
    out = work / "out" / "states.yaml"
    cli("build", "--states", str(out), str(work))
    [state] = yaml.safe_load(out.read_text())["states"]
    assert (
        state["artifact"]["interactions"].endswith(".interactions.jsonl") and "patch" not in state["artifact"]
    )
    assert state["provenance"]["snapshot"] == "commit-restart"
    # replayed keystrokes rebuild the same machine: the hidden tests fail as the TB1 run recorded
    assert state["initial_verdict"] == {
        "failing_tests": sorted(t for t, s in SALES_TESTS.items() if s == "failed"),
        "passing_tests": sorted(t for t, s in SALES_TESTS.items() if s == "passed"),
    }
    status = json.loads(cli("status", "--format", "json", str(work)))
    assert status["by_stage_result"] == {
        "included": 1,
        "duplicate": 1,
        "not_submitted": 1,
        "infra_error": 1,
        "passed": 1,
    }

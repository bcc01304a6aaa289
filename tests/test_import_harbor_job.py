"""`swe-residual import harbor-job`: Harbor job dirs of exported tasks back into a run dir.

The round trip on real parts: the demo track exported with the CLI, Harbor job dirs written here in
Harbor's published layout (TrialResult / TrialConfig JSON, ATIF trajectories, verifier reward and
CTRF files; checked against the `harbor` package's own models when a Python >= 3.12 is there),
imported with the CLI, then `swe-residual report` and `swe-residual gate` on the run dir alone, and
a real local oracle run for the case-id and --append checks.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from swe_residual.errors import InputError
from swe_residual.harbor.import_job import harbor_agent_label

from . import drivers
from .drivers import ON_PYTHONPATH, records, run_suite
from .test_export_harbor import harbor_python  # noqa: F401  (fixture: a venv with the harbor package)

ROOT = Path(__file__).resolve().parent.parent
AGENT, MODEL = "terminus-2", "anthropic/claude-sonnet-4-5"
LABEL = "terminus-2@claude-sonnet-4-5"
T0 = datetime(2025, 11, 3, 14, 2, 11, tzinfo=UTC)
CONFTEST_PATCH = (
    b"diff --git a/conftest.py b/conftest.py\nnew file mode 100644\nindex 0000000..3b18e51\n"
    b"--- /dev/null\n+++ b/conftest.py\n@@ -0,0 +1 @@\n+collect_ignore = ['tests']\n"
)


cli = functools.partial(drivers.cli, env=ON_PYTHONPATH)


def iso(dt: datetime) -> str:
    return dt.isoformat().replace("+00:00", "Z")


@pytest.fixture(scope="module")
def demo_export(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("exp") / "demo"
    res = cli("export", "harbor", "--track", "demo", "--out", str(out))
    assert res.returncode == 0, res.stderr
    return out


# -- Harbor job dirs, written in Harbor's layout ---------------------------------------------------


@dataclass
class Spec:
    """One trial to write: which exported task, and how it went."""

    entry: str  # the exported dir
    suffix: str  # Harbor's 7-character random part of the trial name
    start_min: int  # start, minutes after T0
    reward: float | None = 1.0  # verifier_result.rewards.reward (None: no verifier_result)
    reward_file: str | None = "reward.txt"
    failing: tuple[str, ...] = ()  # graded tests the CTRF report fails
    ctrf: bool = True
    exception: str | None = None
    agent: str = AGENT
    model: str | None = MODEL
    patch: bytes | None = b"solution"  # b"solution": the task's reference solution.patch
    verifier_ran: bool = True


def graded(export: Path, entry: str) -> list[str]:
    cfg = json.loads((export / entry / "tests" / "config.json").read_text())
    return cfg["f2p_node_ids"] + cfg["p2p_node_ids"]


def trial_config(task_path: str, trial_name: str, job_id: str, spec: Spec) -> dict:
    """TrialConfig as Harbor writes config.json (model_dump_json of the defaults we rely on)."""
    return {
        "schema_version": 1,
        "task": {
            "path": task_path,
            "git_url": None,
            "git_commit_id": None,
            "name": None,
            "ref": None,
            "overwrite": False,
            "download_dir": None,
            "source": None,
        },
        "trial_name": trial_name,
        "trials_dir": "jobs/job-1",
        "timeout_multiplier": 1.0,
        "agent": {"name": spec.agent, "import_path": None, "model_name": spec.model, "kwargs": {}},
        "environment": {"type": "modal", "force_build": False, "delete": True},
        "verifier": {"override_timeout_sec": None, "max_timeout_sec": None, "disable": False},
        "artifacts": [],
        "job_id": job_id,
    }


def atif(spec: Spec, n_steps: int) -> dict:
    steps = [{"step_id": 1, "timestamp": iso(T0), "source": "user", "message": "Do the task."}]
    for i in range(n_steps):
        steps.append(
            {
                "step_id": i + 2,
                "timestamp": iso(T0 + timedelta(seconds=40 + i)),
                "source": "agent",
                "model_name": spec.model,
                "message": f"Step {i}: looking at the diff.",
                "tool_calls": [
                    {
                        "tool_call_id": f"call_{i}",
                        "function_name": "bash_command",
                        "arguments": {"keystrokes": f"git diff --stat # {i}\n", "duration": 1.0},
                    }
                ],
                "observation": {"results": [{"source_call_id": f"call_{i}", "content": f"out {i}"}]},
            }
        )
    return {
        "schema_version": "ATIF-v1.4",
        "session_id": f"{spec.suffix}__agent",
        "agent": {"name": spec.agent, "version": "2.0.0", "model_name": spec.model},
        "steps": steps,
    }


def write_trial(job: Path, export: Path, spec: Spec, *, task_root: str | None = None) -> Path:
    """A trial dir as Harbor 0.26 leaves it; task_root: where the config says the task dir was."""
    index = {e["name"]: e for e in json.loads((export / "export.json").read_text())["tasks"]}
    harbor_name = index[spec.entry]["harbor_name"]
    trial_name = (
        f"{harbor_name.split('/')[-1][:32].rstrip('_-')}__{spec.suffix}"  # TrialConfig.generate_trial_name
    )
    task_path = f"{task_root or export}/{spec.entry}"
    d = job / trial_name
    for sub in ("agent", "verifier", "artifacts"):
        (d / sub).mkdir(parents=True)
    job_id = json.loads((job / "result.json").read_text())["id"]
    s = T0 + timedelta(minutes=spec.start_min)
    at = lambda sec: iso(s + timedelta(seconds=sec))
    cfg = trial_config(task_path, trial_name, job_id, spec)
    exc = None
    if spec.exception:
        exc = {
            "exception_type": spec.exception,
            "exception_message": f"{spec.exception}: it happened\nline 2",
            "exception_traceback": f"Traceback (most recent call last):\n{spec.exception}\n",
            "occurred_at": at(290),
        }
        (d / "exception.txt").write_text(exc["exception_traceback"])
    result = {
        "schema_version": 1,
        "id": str(uuid.uuid5(uuid.NAMESPACE_URL, trial_name)),
        "task_name": harbor_name,
        "trial_name": trial_name,
        "trial_uri": f"file:///home/ci/jobs/job-1/{trial_name}",
        "task_id": {"path": task_path},
        "source": None,
        "task_checksum": "9c2f7b1e0d4a",
        "config": cfg,
        "agent_info": {
            "name": spec.agent,
            "version": "2.0.0",
            "model_info": {"name": spec.model.split("/")[-1], "provider": spec.model.split("/")[0]}
            if spec.model
            else None,
        },
        "agent_result": {
            "n_input_tokens": 9000,
            "n_cache_tokens": 0,
            "n_output_tokens": 400,
            "cost_usd": 0.02,
            "rollout_details": None,
            "metadata": None,
        },
        "verifier_result": {"rewards": {"reward": spec.reward}} if spec.reward is not None else None,
        "verifier_environment_mode": "shared",
        "exception_info": exc,
        "started_at": at(0),
        "finished_at": at(345),
        "environment_setup": {"started_at": at(0), "finished_at": at(20)},
        "agent_setup": {"started_at": at(20), "finished_at": at(30)},
        "agent_execution": {"started_at": at(30), "finished_at": at(300)},
        "verifier": {"started_at": at(305), "finished_at": at(340)} if spec.verifier_ran else None,
        "step_results": None,
    }
    (d / "config.json").write_text(json.dumps(cfg, indent=4))
    (d / "result.json").write_text(json.dumps(result, indent=4))
    (d / "agent" / "trajectory.json").write_text(json.dumps(atif(spec, 1 if spec.exception else 2), indent=2))
    if spec.reward is not None and spec.reward_file == "reward.txt":
        (d / "verifier" / "reward.txt").write_text(f"{spec.reward:g}\n")
    elif spec.reward is not None and spec.reward_file == "reward.json":
        (d / "verifier" / "reward.json").write_text(json.dumps({"reward": spec.reward}))
    if spec.ctrf:
        tests = [
            {"name": t, "status": "failed" if t in spec.failing else "passed", "duration": 1}
            for t in graded(export, spec.entry)
        ]
        (d / "verifier" / "ctrf.json").write_text(
            json.dumps(
                {
                    "results": {
                        "tool": {"name": "pytest"},
                        "summary": {"tests": len(tests), "failed": len(spec.failing)},
                        "tests": tests,
                    }
                }
            )
        )
        (d / "verifier" / "test-stdout.txt").write_text(f"{len(tests) - len(spec.failing)} passed\n")
    if spec.patch is not None:
        data = (
            (export / spec.entry / "solution" / "solution.patch").read_bytes()
            if spec.patch == b"solution"
            else spec.patch
        )
        (d / "artifacts" / "model.patch").write_bytes(data)
    return d


def new_job(
    root: Path, name: str = "job-1", agents: tuple[tuple[str, str | None], ...] = ((AGENT, MODEL),)
) -> Path:
    job = root / name
    job.mkdir(parents=True)
    (job / "config.json").write_text(
        json.dumps(
            {
                "schema_version": 1,
                "job_name": name,
                "jobs_dir": "jobs",
                "n_attempts": 1,
                "timeout_multiplier": 1.0,
                "n_concurrent_trials": 4,
                "agents": [{"name": a, "model_name": m} for a, m in agents],
                "tasks": [],
            },
            indent=4,
        )
    )
    (job / "result.json").write_text(
        json.dumps(
            {
                "schema_version": 1,
                "id": str(uuid.uuid5(uuid.NAMESPACE_URL, str(job))),
                "started_at": iso(T0),
                "updated_at": iso(T0 + timedelta(hours=1)),
                "finished_at": iso(T0 + timedelta(hours=1)),
                "n_total_trials": 0,
                "stats": {"n_completed_trials": 0, "n_errored_trials": 0},
                "trial_results": [],
            },
            indent=4,
        )
    )
    return job


ADJ = "date-range-merge--adjacent-not-merged"
ADJ_FAILING = (
    "tests.test_merge.test_format_ranges_merges_first",
    "tests.test_merge.test_merge_adjacent_ranges",
)

# The scenario (agent terminus-2@claude-sonnet-4-5 on track demo); y = the valid outcome:
#   date-range-merge         clean  pass                          y=1
#   ...--adjacent-not-merged  res   pass (starts at +5 min)       y=1   attempt 1
#   ...--adjacent-not-merged  res   fail, 2 tests (+10 min)       y=0   attempt 2 (its dir sorts first)
#   ttl-cache                clean  pass                          y=1
#   ttl-cache--five-minute-default  AgentTimeoutError, reward 1   y=0   rule budget (counted)
#   inventory-reservations   clean  ApiRateLimitError             -     infra_model_service
#   ...--report-filter-stale  res   pass (trial dir name cut to 32 characters)  y=1
#   invoice-rounding         clean  pass                          y=1
#   invoice-rounding--bankers-default  VerifierTimeoutError       -     infra_verifier
#   invoice-rounding--cli-not-wired    pass                       y=1
SCENARIO = [
    Spec("date-range-merge", "Hk3pQ9z", 0),
    Spec(
        ADJ, "Ab12Cd3", 10, reward=0.0, reward_file="reward.json", failing=ADJ_FAILING, patch=CONFTEST_PATCH
    ),
    Spec(ADJ, "Zz98Yx7", 5),
    Spec("ttl-cache", "Vb7nM2c", 1),
    Spec("ttl-cache--five-minute-default", "Kq4Rt6w", 2, exception="AgentTimeoutError"),
    Spec(
        "inventory-reservations",
        "Pp3Ll5n",
        3,
        reward=0.0,
        exception="ApiRateLimitError",
        ctrf=False,
        verifier_ran=False,
    ),
    Spec("inventory-reservations--report-filter-stale", "Mm2Nn4b", 4),
    Spec("invoice-rounding", "Jj6Hh8g", 6),
    Spec(
        "invoice-rounding--bankers-default",
        "Gg1Ff2d",
        7,
        reward=None,
        exception="VerifierTimeoutError",
        ctrf=False,
    ),
    Spec("invoice-rounding--cli-not-wired", "Ss5Dd7f", 8),
]


@pytest.fixture(scope="module")
def job(demo_export, tmp_path_factory) -> Path:
    j = new_job(tmp_path_factory.mktemp("jobs"))
    for spec in SCENARIO:
        write_trial(j, demo_export, spec)
    return j


# -- the fixtures are what Harbor writes --------------------------------------------------------------

CHECK_WITH_HARBOR = r"""
import json, sys
from pathlib import Path
from harbor.models.job.config import JobConfig
from harbor.models.job.result import JobResult
from harbor.models.task.task import Task
from harbor.models.trajectories.trajectory import Trajectory
from harbor.models.trial.config import TrialConfig
from harbor.models.trial.result import TrialResult
job = Path(sys.argv[1])
JobConfig.model_validate_json((job / "config.json").read_text())
JobResult.model_validate_json((job / "result.json").read_text())
out = {}
for d in sorted(p for p in job.iterdir() if p.is_dir()):
    mine = json.loads((d / "result.json").read_text())
    r = TrialResult.model_validate(mine)
    c = TrialConfig.model_validate_json((d / "config.json").read_text())
    Trajectory.model_validate_json((d / "agent" / "trajectory.json").read_text())
    dumped = json.loads(r.model_dump_json())
    out[d.name] = {"unknown_keys": sorted(set(mine) - set(dumped)),
                   "unknown_config_keys": sorted(set(mine["config"]) - set(dumped["config"])),
                   "task_name_harbor_gives": Task(Path(c.task.path)).name, "task_name": r.task_name,
                   "reward_valid": dumped["reward_valid"],
                   "policy": dumped["exception_info"]["policy"] if r.exception_info else None}
print(json.dumps(out))
"""


def test_fixture_trials_are_valid_harbor_results(harbor_python, job):  # noqa: F811
    res = subprocess.run(
        [harbor_python, "-c", CHECK_WITH_HARBOR, str(job)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    got = json.loads(res.stdout)
    assert len(got) == len(SCENARIO)
    for name, t in got.items():
        assert t["unknown_keys"] == [] and t["unknown_config_keys"] == [], name
        # the name Harbor gives the exported dir is the one our trials record
        assert t["task_name_harbor_gives"] == t["task_name"], name
    # Harbor's own policy for the exceptions agrees with the rules the import applies
    assert (
        got["ttl-cache--five-minute-default__Kq4Rt6w"]["policy"]["has_valid_reward"] is True
    )  # budget: graded
    assert got["inventory-reservations__Pp3Ll5n"]["policy"]["has_valid_reward"] is False  # model service
    assert got["inventory-reservations__Pp3Ll5n"]["reward_valid"] is False


# -- the round trip -----------------------------------------------------------------------------------


@pytest.mark.slow
def test_round_trip_report_and_gates(job, demo_export, tmp_path):
    run = tmp_path / "run"
    res = cli("import", "harbor-job", str(job), "--run-dir", str(run))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "imported 10 trials (9 cases), 0 already imported, 0 failed" in res.stdout
    recs = records(run)
    by = {(r["case_id"], r["attempt"]): r for r in recs}
    assert len(recs) == 10 and len(by) == 10

    adj = f"{LABEL}-date-range-merge-residual-{ADJ}"
    first, second = by[(adj, 1)], by[(adj, 2)]
    # attempts in order of start time, not of dir names (Ab12Cd3 sorts before Zz98Yx7 but started later)
    assert first["outcome"] == 1 and first["artifacts"]["harbor_result"].endswith(
        "attempt-1/harbor/result.json"
    )
    assert second["outcome"] == 0 and second["verdict"] == "fail" and second["rule"] == "verdict"
    assert json.loads((run / second["artifacts"]["harbor_result"]).read_text())["trial_name"].endswith(
        "Ab12Cd3"
    )
    assert {t for t, s in second["tests"].items() if s == "failed"} == set(ADJ_FAILING)
    assert len(second["tests"]) == 16 and second["missing_tests"] == []
    assert second["integrity"] == ["test-infrastructure: conftest.py"]
    assert second["state"] == ADJ and second["predecessor"] == {
        "agent": "handwritten",
        "model_family": "handwritten",
    }
    assert (
        second["agent"] == LABEL
        and second["harness"] == "harbor/terminus-2"
        and second["backend"] == "harbor-modal"
    )
    assert (second["duration_s"], second["agent_duration_s"], second["verify_duration_s"]) == (
        345.0,
        270.0,
        35.0,
    )
    assert second["declared_complete"] is True and second["termination"] == "submitted"
    assert second["finished_at"] == (T0 + timedelta(minutes=10, seconds=345)).timestamp()

    budget = by[(f"{LABEL}-ttl-cache-residual-ttl-cache--five-minute-default", 1)]
    assert (budget["outcome"], budget["verdict"], budget["rule"], budget["termination"]) == (
        0,
        "fail",
        "budget",
        "budget",
    )
    assert budget["error"] == "AgentTimeoutError: AgentTimeoutError: it happened"
    model = by[(f"{LABEL}-inventory-reservations-clean", 1)]
    assert (model["outcome"], model["verdict"], model["rule"]) == (None, "infra_error", "infra_model_service")
    assert model["tests"] == {}
    verifier = by[(f"{LABEL}-invoice-rounding-residual-invoice-rounding--bankers-default", 1)]
    assert (verifier["outcome"], verifier["verdict"], verifier["rule"]) == (
        None,
        "infra_error",
        "infra_verifier",
    )
    # the long residual name: its trial dir is cut to 32 characters, the case comes from task_name
    stale = by[(f"{LABEL}-inventory-reservations-residual-inventory-reservations--report-filter-stale", 1)]
    assert (
        stale["outcome"] == 1
        and stale["artifacts"]["harbor_result"].count("inventory-reservations--report-filter-stale") == 1
    )

    # artifacts like our own runs': the normalized trajectory, the final patch, the verifier log
    clean = by[(f"{LABEL}-date-range-merge-clean", 1)]
    assert (
        clean["artifacts"]["trajectory"]
        == f"cases/{LABEL.replace('@', '_')}-date-range-merge-clean/attempt-1/trajectory.json"
    )
    traj = json.loads((run / clean["artifacts"]["trajectory"]).read_text())
    assert (
        traj["format"] == "swe-residual-trajectory-1"
        and traj["agent"] == LABEL
        and traj["harness"] == "terminus-2"
    )
    assert [s["actions"][0]["command"] for s in traj["steps"]] == [
        "git diff --stat # 0",
        "git diff --stat # 1",
    ]
    assert clean["steps"] == 2 and budget["steps"] == 1
    assert (run / clean["artifacts"]["patch"]).read_bytes() == (
        demo_export / "date-range-merge" / "solution" / "solution.patch"
    ).read_bytes()
    assert (run / clean["artifacts"]["verifier_log"]).read_text() == "16 passed\n"

    manifest = json.loads((run / "manifest.json").read_text())
    assert sorted(manifest["cases"]) == sorted({r["case_id"] for r in recs})
    assert sorted(manifest["tasks"]) == [
        "demo/date-range-merge",
        "demo/inventory-reservations",
        "demo/invoice-rounding",
        "demo/ttl-cache",
    ]
    assert len(manifest["tasks"]["demo/date-range-merge"]["tests"]) == 16
    assert manifest["tasks"]["demo/date-range-merge"]["solution_files"]
    st = manifest["states"][ADJ]
    assert st["failing_tests"] == sorted(ADJ_FAILING) and st["patch"] == f"states/{ADJ}.patch"
    assert (run / st["patch"]).read_bytes() == (
        ROOT / "suites/demo/states/date-range-merge/adjacent-not-merged.patch"
    ).read_bytes()
    assert len(manifest["states"]) == 5

    rep = cli("report", str(run), "--format", "json")
    assert rep.returncode == 0, rep.stderr
    summary = json.loads(rep.stdout)
    row = summary["tracks"]["demo"][LABEL]
    # Per task (valid outcomes only; a state's attempts averaged first):
    #   date-range-merge  clean 1, residual mean(adjacent: (1+0)/2) = 0.5
    #   ttl-cache         clean 1, residual 0 (budget)
    #   invoice-rounding  clean 1, residual mean(cli-not-wired 1) = 1 (bankers-default has no valid outcome)
    #   inventory-reservations: residual 1 but no clean outcome -> left out of both, listed
    # Residual = (0.5 + 0 + 1) / 3 = 0.5; Clean = 1; Gap = 50 pts; CondFail over the 3 clean-solved
    # tasks = ((1-0.5) + (1-0) + (1-1)) / 3 = 0.5
    assert row["n_tasks"] == 3 and row["tasks_without_clean"] == ["inventory-reservations"]
    assert row["residual"] == pytest.approx(0.5) and row["clean"] == pytest.approx(1.0)
    assert row["gap"] == pytest.approx(50.0) and row["cond_fail"] == pytest.approx(0.5)
    assert row["n_clean_solved"] == 3
    # valid runs: residual 2 (adjacent) + 1 (budget) + 1 (stale) + 1 (cli) = 5; clean 3; infra 2; flagged 1
    assert (row["n_residual_runs"], row["n_clean_runs"], row["n_infra_errors"], row["n_flagged"]) == (
        5,
        3,
        2,
        1,
    )
    assert {k: v["records"] for k, v in summary["rules"].items()} == {
        "verdict": 7,
        "budget": 1,
        "infra_model_service": 1,
        "infra_verifier": 1,
    }

    def gate(*args: str) -> int:
        return cli("gate", str(run), *args).returncode

    assert gate("--min-residual", "50") == 0
    assert gate("--min-residual", "50.1") == 10
    assert gate("--max-gap", "49") == 10
    assert gate("--max-flagged", "0") == 10
    # infra: 2 of 9 cases have no valid verdict = 22.2%
    assert gate("--max-infra", "0.25") == 0
    assert gate("--max-infra", "0.2") == 11


@pytest.mark.slow
def test_reimport_adds_nothing(job, tmp_path):
    run = tmp_path / "run"
    assert cli("import", "harbor-job", str(job), "--run-dir", str(run)).returncode == 0
    before = (run / "results.jsonl").read_bytes()
    manifest = (run / "manifest.json").read_bytes()
    again = cli("import", "harbor-job", str(job), "--run-dir", str(run))
    assert again.returncode == 0, again.stderr
    assert "imported 0 trials (0 cases), 10 already imported, 0 failed" in again.stdout
    # a copy of the job elsewhere is the same trials (TrialResult.id), even with one trial dir renamed
    copy = tmp_path / "copied-job"
    shutil.copytree(job, copy)
    (copy / "ttl-cache__Vb7nM2c").rename(copy / "renamed")
    third = cli("import", "harbor-job", str(copy), str(job / "ttl-cache__Vb7nM2c"), "--run-dir", str(run))
    assert third.returncode == 0 and "imported 0 trials (0 cases), 11 already imported" in third.stdout
    assert (run / "results.jsonl").read_bytes() == before and (run / "manifest.json").read_bytes() == manifest


def _collected_ids(*args: str, run_dir: Path) -> set[str]:
    res = run_suite(*args, "--collect-only", "-q", "-p", "no:xdist", run_dir=run_dir, env=ON_PYTHONPATH)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    return {line.split("[", 1)[1].rstrip("]") for line in res.stdout.splitlines() if "::test_case[" in line}


@pytest.mark.slow
def test_case_ids_and_append_to_our_own_run(demo_export, tmp_path):
    """Harbor's oracle imports under our oracle's case ids; a run dir of a real local oracle run
    takes them only with --append, as further attempts, and the report merges both."""
    job = new_job(tmp_path / "jobs", agents=(("oracle", None),))
    for spec in (
        Spec("date-range-merge", "Aa1Bb2c", 0, agent="oracle", model=None),
        Spec(ADJ, "Cc3Dd4e", 1, agent="oracle", model=None),
        Spec("ttl-cache", "Ee5Ff6g", 2, agent="oracle", model=None),
    ):
        write_trial(job, demo_export, spec)
    collected = _collected_ids("--agent", "oracle", run_dir=tmp_path / "collect")
    fresh = tmp_path / "fresh"
    assert cli("import", "harbor-job", str(job), "--run-dir", str(fresh)).returncode == 0
    imported = {r["case_id"] for r in records(fresh)}
    assert imported == {
        "oracle-date-range-merge-clean",
        f"oracle-date-range-merge-residual-{ADJ}",
        "oracle-ttl-cache-clean",
    }
    assert imported <= collected

    own = tmp_path / "own"
    run = run_suite(
        "-p",
        "no:xdist",
        "-q",
        "-k",
        "date-range-merge-clean",
        agents=["oracle"],
        run_dir=own,
        env=ON_PYTHONPATH,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert [r["case_id"] for r in records(own)] == ["oracle-date-range-merge-clean"]
    refused = cli("import", "harbor-job", str(job), "--run-dir", str(own))
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines() == [
        (
            f"error: --run-dir {own}: already holds records of 1 of these cases (oracle-date-range-merge-clean); pass "
            "--append to add the trials as further attempts, or choose a new --run-dir"
        )
    ]
    assert len(records(own)) == 1
    ok = cli("import", "harbor-job", str(job), "--run-dir", str(own), "--append")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    recs = records(own)
    assert [(r["case_id"], r["attempt"], r["backend"]) for r in recs] == [
        ("oracle-date-range-merge-clean", 1, "local"),
        ("oracle-date-range-merge-clean", 2, "harbor-modal"),
        (f"oracle-date-range-merge-residual-{ADJ}", 1, "harbor-modal"),
        ("oracle-ttl-cache-clean", 1, "harbor-modal"),
    ]
    manifest = json.loads((own / "manifest.json").read_text())
    assert set(manifest["cases"]) == imported and ADJ in manifest["states"]
    summary = json.loads(cli("report", str(own), "--format", "json").stdout)
    row = summary["tracks"]["demo"]["oracle"]
    # date-range-merge: clean (1 + 1) / 2 = 1, residual 1; ttl-cache has no residual outcome -> T = 1 task
    assert (row["n_tasks"], row["residual"], row["clean"], row["gap"], row["n_clean_runs"]) == (
        1,
        1.0,
        1.0,
        0.0,
        3,
    )


@pytest.mark.slow
def test_hostile_trials_are_refused_or_not_read(demo_export, tmp_path):
    job = new_job(tmp_path / "jobs")
    outside = tmp_path / "secret.txt"
    outside.write_text("SECRET-CONTENT\n")
    linked = write_trial(job, demo_export, Spec("date-range-merge", "Ll1Nk2d", 0))
    (linked / "result.json").rename(tmp_path / "real-result.json")
    os.symlink(tmp_path / "real-result.json", linked / "result.json")
    huge = write_trial(job, demo_export, Spec("ttl-cache", "Hh9Ug3e", 1))
    with open(huge / "result.json", "r+b") as fh:
        fh.truncate(17 << 20)  # sparse: over the 16 MiB bound, nothing really written
    traj_link = write_trial(job, demo_export, Spec("invoice-rounding", "Tt4Rj5k", 2))
    (traj_link / "agent" / "trajectory.json").unlink()
    os.symlink(outside, traj_link / "agent" / "trajectory.json")
    big_patch = write_trial(job, demo_export, Spec("semver-prerelease", "Bb6Pp7t", 3))
    with open(big_patch / "artifacts" / "model.patch", "r+b") as fh:
        fh.truncate(65 << 20)
    run = tmp_path / "run"
    res = cli("import", "harbor-job", str(job), "--run-dir", str(run))
    assert res.returncode == 1
    failed = sorted(line for line in res.stdout.splitlines() if line.startswith("  FAILED"))
    assert failed == [
        f"  FAILED {linked / 'result.json'}: a symlink; not followed",
        f"  FAILED {huge / 'result.json'}: {17 << 20} bytes, over the 16 MiB bound; not read",
    ]
    assert "imported 2 trials (2 cases), 0 already imported, 2 failed" in res.stdout
    recs = {r["task"]: r for r in records(run)}
    # files written inside the environment are never followed or read past their bound, but the
    # trial still counts (an agent cannot make its own run disappear by planting a link)
    inv = recs["invoice-rounding"]
    assert inv["outcome"] == 1 and "trajectory" not in inv["artifacts"] and inv["steps"] is None
    assert f"{traj_link / 'agent' / 'trajectory.json'}: a symlink; not followed" in inv["verdict_note"]
    sem = recs["semver-prerelease"]
    assert sem["outcome"] == 1 and "patch" not in sem["artifacts"]
    assert (
        f"{big_patch / 'artifacts' / 'model.patch'}: {65 << 20} bytes, over the 64 MiB bound"
        in sem["verdict_note"]
    )
    leaked = [p for p in run.rglob("*") if p.is_file() and b"SECRET-CONTENT" in p.read_bytes()]
    assert leaked == [] and not any(p.is_symlink() for p in run.rglob("*"))


@pytest.mark.slow
def test_trials_must_match_the_export(demo_export, tmp_path):
    # the config records the task dirs where Harbor ran (another machine): --export is needed
    job = new_job(tmp_path / "jobs")
    write_trial(job, demo_export, Spec("date-range-merge", "Qq1Ww2e", 0), task_root="/home/ci/export")
    res = cli("import", "harbor-job", str(job), "--run-dir", str(tmp_path / "r1"))
    assert res.returncode == 1
    assert (
        f"{job / 'date-range-merge__Qq1Ww2e' / 'result.json'}: task 'date-range-merge': the task path its config "
        "records (/home/ci/export/date-range-merge) is not in an export dir here; pass --export DIR"
        in res.stdout
    )
    ok = cli(
        "import", "harbor-job", str(job), "--run-dir", str(tmp_path / "r1"), "--export", str(demo_export)
    )
    assert ok.returncode == 0 and "imported 1 trials (1 cases)" in ok.stdout
    assert (
        cli(
            "import", "harbor-job", str(job), "--run-dir", str(tmp_path / "r2"), "--export", str(tmp_path)
        ).stderr.strip()
        == f"error: {tmp_path / 'export.json'}: missing; pass --export with the "
        "dir `swe-residual export harbor` wrote"
    )

    # a state patch changed after the export is refused, naming the file
    tampered = tmp_path / "tampered"
    shutil.copytree(demo_export, tampered, symlinks=True)
    patch = tampered / ADJ / "environment" / ".swe-residual" / "state.patch"
    patch.write_bytes(patch.read_bytes() + b"\n")
    job2 = new_job(tmp_path / "jobs2")
    write_trial(job2, tampered, Spec(ADJ, "Rr3Tt4y", 0))
    # a task the export does not have (matched on recorded names only)
    other = write_trial(job2, tampered, Spec("ttl-cache", "Uu5Ii6o", 1))
    for name in ("result.json", "config.json"):
        text = (other / name).read_text().replace(f"{tampered}/ttl-cache", f"{tampered}/ttl-cache-v2")
        (other / name).write_text(text.replace('"task_name": "ttl-cache"', '"task_name": "ttl-cache-v2"'))
    res = cli("import", "harbor-job", str(job2), "--run-dir", str(tmp_path / "r3"))
    assert res.returncode == 1
    assert sorted(line for line in res.stdout.splitlines() if line.startswith("  FAILED")) == [
        (
            f"  FAILED {other / 'result.json'}: task 'ttl-cache-v2' (recorded names: ttl-cache-v2) is not in {tampered}; "
            "pass the --export DIR these tasks were exported to"
        ),
        (
            f"  FAILED {patch}: sha256 does not match state_patch_sha256 in {tampered / ADJ / 'task.toml'}; export "
            "the track again"
        ),
    ]
    assert not (tmp_path / "r3" / "results.jsonl").exists()

    # a run dir whose copy of a state differs from the exported state is refused before any write
    job3 = new_job(tmp_path / "jobs3")
    write_trial(job3, demo_export, Spec(ADJ, "Pp7Oo8i", 0))
    (tmp_path / "r4" / "states").mkdir(parents=True)
    (tmp_path / "r4" / "states" / f"{ADJ}.patch").write_bytes(b"another state\n")
    res = cli("import", "harbor-job", str(job3), "--run-dir", str(tmp_path / "r4"))
    assert res.returncode == 2 and res.stderr.strip() == (
        f"error: {tmp_path / 'r4' / 'states' / f'{ADJ}.patch'}: state {ADJ} in the run dir is not the exported one "
        f"({demo_export / ADJ / 'environment' / '.swe-residual' / 'state.patch'}); choose a new --run-dir"
    )
    assert (
        not (tmp_path / "r4" / "results.jsonl").exists() and not (tmp_path / "r4" / "manifest.json").exists()
    )


def test_agent_labels():
    assert (
        harbor_agent_label("terminus-2", "anthropic/claude-sonnet-4-5", "x") == "terminus-2@claude-sonnet-4-5"
    )
    assert harbor_agent_label("oracle", None, "x") == "oracle"
    assert (
        harbor_agent_label("my agent", "openrouter/qwen/qwen3 coder:free", "x") == "my-agent@qwen3-coder-free"
    )
    with pytest.raises(InputError, match="agent_info.name: missing; pass --agent NAME"):
        harbor_agent_label(None, "gpt-5", "x")


@pytest.mark.slow
def test_agent_written_exit_status_never_excludes_a_run(demo_export, tmp_path):
    """mini-swe-agent's trajectory is written inside the environment: its exit status may make a
    run a counted failure (a step limit: budget, outcome 0 even with reward 1) but a model-service
    status it claims does not turn a failed run into an uncounted infra error."""
    job = new_job(tmp_path / "jobs", agents=(("mini-swe-agent", MODEL),))
    claims = {"date-range-merge": ("LimitsExceeded", 1.0), "ttl-cache": ("APIConnectionError", 0.0)}
    for i, (entry, (status, reward)) in enumerate(claims.items()):
        d = write_trial(job, demo_export, Spec(entry, f"Ms{i}aB3c", i, agent="mini-swe-agent", reward=reward))
        (d / "agent" / "mini-swe-agent.trajectory.json").write_text(
            json.dumps(
                {
                    "trajectory_format": "mini-swe-agent-1.1",
                    "info": {"exit_status": status, "submission": ""},
                    "messages": [
                        {"role": "assistant", "content": "ls", "extra": {"actions": [{"command": "ls"}]}}
                    ],
                }
            )
        )
    run = tmp_path / "run"
    assert cli("import", "harbor-job", str(job), "--run-dir", str(run)).returncode == 0
    recs = {r["task"]: r for r in records(run)}
    limits, service = recs["date-range-merge"], recs["ttl-cache"]
    assert (limits["outcome"], limits["rule"], limits["termination"]) == (0, "budget", "budget")
    assert (service["outcome"], service["rule"], service["verdict"]) == (0, "verdict", "fail")
    assert (
        "exit_status 'APIConnectionError' (infra_model_service); written inside the environment, not trusted"
        in service["verdict_note"]
    )
    assert service["agent"] == "mini-swe-agent@claude-sonnet-4-5"


@pytest.mark.slow
def test_reward_files_against_result_json(demo_export, tmp_path):
    """result.json's verifier_result is Harbor's record of the reward; the verifier's reward file
    alone counts only when the verifier's run finished (else an agent could have planted it)."""
    job = new_job(tmp_path / "jobs")

    def edit(d: Path, **changes) -> None:
        result = json.loads((d / "result.json").read_text())
        result.update(changes)
        (d / "result.json").write_text(json.dumps(result, indent=4))

    edit(write_trial(job, demo_export, Spec("date-range-merge", "Rw1Fl2a", 0)), verifier_result=None)
    edit(write_trial(job, demo_export, Spec("ttl-cache", "Rw3Fl4b", 1)), verifier_result=None, verifier=None)
    edit(
        write_trial(job, demo_export, Spec("invoice-rounding", "Rw5Fl6c", 2)),
        verifier_result={"rewards": {"reward": 0.0}},
    )
    run = tmp_path / "run"
    assert cli("import", "harbor-job", str(job), "--run-dir", str(run)).returncode == 0
    recs = {r["task"]: r for r in records(run)}
    from_file, planted, disagree = recs["date-range-merge"], recs["ttl-cache"], recs["invoice-rounding"]
    assert (
        from_file["outcome"] == 1
        and "reward read from the verifier's reward file" in from_file["verdict_note"]
    )
    assert (planted["outcome"], planted["rule"]) == (None, "infra_verifier")
    assert planted["error"] == "result.json has no verifier_result reward"
    assert (
        disagree["outcome"] == 0
        and disagree["verdict_note"]
        == "verifier/reward file says {'reward': 1.0}, result.json {'reward': 0.0}; result.json kept"
    )

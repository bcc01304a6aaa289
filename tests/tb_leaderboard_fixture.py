"""Terminal-Bench 2 leaderboard trials written by us in the published layout, as a dir, over http
from 127.0.0.1 (the Hugging Face dataset API) and as a git repository.

The layout (docs/residualization.md, "Terminal-Bench 2's leaderboard trials"; the
`harborframework/terminal-bench-2-leaderboard` dataset):

    submissions/terminal-bench/2.0/<agent>__<model>/metadata.yaml
                                                   <job>/config.json, result.json      (JobConfig, JobResult)
                                                   <job>/<trial>/config.json            (TrialConfig)
                                                   <job>/<trial>/result.json            (TrialResult)
                                                   <job>/<trial>/agent/trajectory.json  (ATIF)
                                                   <job>/<trial>/agent/episode-N/{prompt.txt, response.txt}
                                                   <job>/<trial>/verifier/{reward.txt, ctrf.json, test-stdout.txt}

for the five bundled machine tasks (suites/terminal_bench/tasks). Three submissions of 5 tasks x 5
trials, 75 trials in all: Terminus-2 (keystrokes with durations), an installed agent (Claude Code:
Bash, Write, Read, Edit calls) and Codex (`shell` argv calls); passed, failed with a replayable
trajectory of each kind, errored rows of several kinds (agent timeout, context, rate limit,
a harness crash, verifier timeout), a trial with only Terminus-2's episode logs, a trajectory whose
Edit call cannot be replayed; plus `hostile=True`: a fourth submission of hostile files.

    fx = make_leaderboard(tmp / "lb")                  # writes the dir; fx.trials: TrialSpec list
    with serve(fx.root) as srv:                        # the HF dataset API on 127.0.0.1
        srv.dataset_url                                # http://127.0.0.1:P/datasets/harborframework/...
        srv.requests                                   # every path asked for
    git_url = make_git_repo(fx.root, tmp / "git")      # file:// URL of a bare repository
"""

from __future__ import annotations

import base64
import contextlib
import http.server
import json
import os
import shutil
import subprocess
import threading
import urllib.parse
import uuid
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TASKS_DIR = ROOT / "suites" / "terminal_bench" / "tasks"
TASKS = ("kv-service", "notify-relay", "sales-report", "vm-console", "wcount-build")
# three more machine tasks of our own (a daemon, a service, a compiled program) for the end-to-end
# fixture, with what predecessors typed that left each one half done (residual_sessions.json)
FIXTURE_TASKS_DIR = ROOT / "tests" / "fixtures" / "tb-tasks"
SCALE_TASKS = (*TASKS, "heartbeat-daemon", "static-site", "crc-tool")
# three real Terminal-Bench 2.1 tasks (tests/fixtures/real/terminal-bench, PROVENANCE.md) and a
# predecessor session of ours for each (residual_sessions.json there)
REAL_TASKS_DIR = ROOT / "tests" / "fixtures" / "real" / "terminal-bench"
REAL_TASKS = ("configure-git-webserver", "build-pmars", "openssl-selfsigned-cert")
VERSION = "2.0"
DATASET = "harborframework/terminal-bench-2-leaderboard"

SUBMISSIONS = {
    "Terminus2__GLM-4.7": ("terminus-2", "openrouter/z-ai/glm-4.7", "Terminus 2", "GLM-4.7", "openrouter"),
    "Claude-Code__Claude-Opus-4.1": (
        "claude-code",
        "anthropic/claude-opus-4-1",
        "Claude Code",
        "Claude Opus 4.1",
        "anthropic",
    ),
    "Codex-CLI__GPT-5": ("codex", "openai/gpt-5", "Codex CLI", "GPT-5", "openai"),
}
JOB = "2025-11-01__10-00-00"

# what a predecessor typed: the sales-report job over the top-level files only (the bundled state
# top-level-only), and the wcount build that never reinstalled (not-reinstalled)
SALES_KEYS = [
    ("ls -R /data/incoming && python3 /opt/jobs/summarize.py --help\n", 1.0),
    ("python3 /opt/jobs/summarize.py --out /data/out/summary.json /data/incoming/*.csv\n", 2.0),
    ("cat /data/out/summary.json\n", 0.5),
]
WCOUNT_SRC = (
    ROOT / "suites/terminal_bench/states/wcount-build/not-reinstalled.interactions.jsonl"
).read_text()


def _wcount_calls() -> list[tuple[str, dict]]:
    lines = [json.loads(x) for x in WCOUNT_SRC.splitlines() if x.strip()]
    first, heredoc, last = (x["input"] for x in lines)
    body = heredoc.split("<<'EOF'\n", 1)[1].rsplit("\nEOF", 1)[0] + "\n"
    return [
        ("Bash", {"command": first, "description": "build and install"}),
        ("Read", {"file_path": "/opt/src/wcount/wcount.c"}),
        ("Write", {"file_path": "/opt/src/wcount/wcount.c", "content": body}),
        ("TodoWrite", {"todos": [{"content": "rebuild", "status": "completed"}]}),
        ("Bash", {"command": "cd /opt/src/wcount"}),
        ("Bash", {"command": "make && ./wcount --unique Makefile"}),
    ]


def task_dir(task: str) -> Path:
    """A bundled task's dir, else the fixture's own (tests/fixtures/tb-tasks), else a real one."""
    for where in (TASKS_DIR, FIXTURE_TASKS_DIR):
        if (where / task).is_dir():
            return where / task
    return REAL_TASKS_DIR / task


def _seconds(command: str) -> float:
    """The duration a Terminus-2 predecessor gave a command line: long enough that it ended before
    the next keystrokes (a build still running when the machine is snapshotted is another state)."""
    if any(w in command for w in ("make", "pip ", "gcc", "venv")):
        return 12.0
    return 2.0 if any(w in command for w in ("sleep", "nohup", "seq ")) else 0.5


def residual_sessions() -> dict[str, dict[str, list[str]]]:
    """Per task, per state name: the command lines a predecessor typed that left the task half done.
    The bundled tasks': the project's handwritten states (suites/terminal_bench/states); the fixture
    tasks' and the real ones': residual_sessions.json in their dirs."""
    out: dict[str, dict[str, list[str]]] = {}
    for path in sorted((ROOT / "suites" / "terminal_bench" / "states").glob("*/*.interactions.jsonl")):
        lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
        name = path.name.removesuffix(".interactions.jsonl")
        out.setdefault(path.parent.name, {})[name] = [x["input"].rstrip("\n") for x in lines]
    for task, states in session_entries().items():
        for name, entry in states.items():
            out.setdefault(task, {})[name] = list(entry["commands"])
    return out


def session_entries() -> dict[str, dict[str, dict]]:
    """The residual_sessions.json entries of the fixture tasks and the real ones, per task and name."""
    out: dict[str, dict[str, dict]] = {}
    for where in (FIXTURE_TASKS_DIR, REAL_TASKS_DIR):
        path = where / "residual_sessions.json"
        if path.is_file():
            out.update(json.loads(path.read_text()))
    return out


@dataclass
class TrialSpec:
    submission: str
    task: str
    kind: str  # passed | failed | timeout | context | rate_limit | crash | verifier_timeout | episodes | unreplayable
    n: int
    expect: str | None = None  # Stage II bucket a correct import gives it (None: not imported)
    session: str | None = None  # the residual session it typed (residual_sessions()), else a harmless one

    @property
    def trial(self) -> str:
        return f"{self.task[:32]}__{self.submission[:3].lower()}{self.n:04d}"

    @property
    def agent(self) -> str:
        return SUBMISSIONS[self.submission][0]

    @property
    def model(self) -> str:
        return SUBMISSIONS[self.submission][1]

    @property
    def uid(self) -> str:
        return str(uuid.uuid5(uuid.NAMESPACE_URL, f"{self.submission}/{self.trial}"))


EXCEPTIONS = {
    "timeout": "AgentTimeoutError",
    "context": "ContextLengthExceededError",
    "rate_limit": "ApiRateLimitError",
    "crash": "RuntimeError",
    "verifier_timeout": "VerifierTimeoutError",
}
BUCKETS = {
    "passed": "passed",
    "failed": "candidate",
    "episodes": "candidate",
    "unreplayable": "candidate",
    "timeout": "not_submitted",
    "context": "not_submitted",
    "rate_limit": "infra_error",
    "crash": "infra_error",
    "verifier_timeout": "infra_error",
}


def default_specs() -> list[TrialSpec]:
    """5 trials per task and submission: which kind each is."""
    plans = {
        "Terminus2__GLM-4.7": ["passed", "failed", "timeout", "rate_limit", "episodes"],
        "Claude-Code__Claude-Opus-4.1": ["passed", "failed", "unreplayable", "crash", "context"],
        "Codex-CLI__GPT-5": ["passed", "failed", "verifier_timeout", "failed", "timeout"],
    }
    out, n = [], 0
    for sub, kinds in plans.items():
        for task in TASKS:
            for kind in kinds:
                n += 1
                out.append(TrialSpec(sub, task, kind, n, BUCKETS[kind]))
    return out


def scale_specs(tasks: tuple[str, ...] = SCALE_TASKS) -> list[TrialSpec]:
    """The end-to-end fixture over `tasks`: every residual session typed by a Terminus-2 run
    (keystrokes) and by a Codex run (shell calls), both failed; per task two passed runs and two
    errored rows of different kinds; over the tasks one run with only episode logs and two Claude
    Code runs with a call no replay can reproduce. SCALE_TASKS: 61 trials with the 13 sessions."""
    sessions = residual_sessions()
    errored = ["timeout", "context", "rate_limit", "crash", "verifier_timeout"]
    out: list[TrialSpec] = []

    def add(sub: str, task: str, kind: str, session: str | None = None) -> None:
        out.append(TrialSpec(sub, task, kind, len(out) + 1, BUCKETS[kind], session))

    for i, task in enumerate(tasks):
        for state in sessions.get(task, {}):
            add("Terminus2__GLM-4.7", task, "failed", state)
            add("Codex-CLI__GPT-5", task, "failed", state)
        add("Terminus2__GLM-4.7", task, "passed")
        add("Claude-Code__Claude-Opus-4.1", task, "passed")
        add("Codex-CLI__GPT-5", task, errored[i % len(errored)])
        add("Claude-Code__Claude-Opus-4.1", task, errored[(i + 2) % len(errored)])
    for sub, task, kind, session in (
        ("Terminus2__GLM-4.7", "sales-report", "episodes", "top-level-only"),
        ("Claude-Code__Claude-Opus-4.1", "kv-service", "unreplayable", "tmp-data-dir"),
        ("Claude-Code__Claude-Opus-4.1", "crc-tool", "unreplayable", "fixed-not-reinstalled"),
    ):
        if task in tasks:
            add(sub, task, kind, session)
    return out


def _keystrokes(spec: TrialSpec) -> list[tuple[str, float]]:
    if spec.session is not None:
        return [(c + "\n", _seconds(c)) for c in residual_sessions()[spec.task][spec.session]]
    if spec.task == "sales-report":
        return SALES_KEYS + ([(f"echo checked-{spec.n}\n", 0.2)] if spec.kind != "failed" else [])
    # a different, harmless attempt per trial, so no two runs of a task are duplicates
    return [
        (f"ls -la /tmp && echo attempt-{spec.n}\n", 0.5),
        ("C-c", 0.1),
        (f"touch /tmp/try-{spec.n}\n", 0.5),
    ]


def _calls(spec: TrialSpec) -> list[tuple[str, dict]]:
    """An installed agent's tool calls (Claude Code's, or Codex's argv `shell`)."""
    if spec.session is not None:
        lines = residual_sessions()[spec.task][spec.session]
        if spec.agent == "codex":
            return [("shell", {"command": ["bash", "-lc", c]}) for c in lines] + [
                ("update_plan", {"plan": [{"step": "done", "status": "completed"}]})
            ]
        calls = [("Bash", {"command": c}) for c in lines]
        if spec.kind == "unreplayable":
            calls.insert(1, ("Edit", {"file_path": "/etc/motd", "old_string": "a", "new_string": "b"}))
        return calls
    if spec.agent == "codex":
        return [
            ("shell", {"command": ["bash", "-lc", f"ls /tmp && echo codex-{spec.n} > /tmp/codex-{spec.n}"]}),
            ("update_plan", {"plan": [{"step": "done", "status": "completed"}]}),
        ]
    calls = (
        _wcount_calls()
        if spec.task == "wcount-build"
        else [
            ("Bash", {"command": f"ls -la / && echo claude-{spec.n} > /tmp/claude-{spec.n}"}),
            ("Grep", {"pattern": "x", "path": "/etc"}),
        ]
    )
    if spec.kind == "unreplayable":
        calls = calls[:1] + [
            ("Edit", {"file_path": "/etc/motd", "old_string": "a", "new_string": "b"}),
            ("Bash", {"command": "echo after"}),
        ]
    return calls


def trajectory(spec: TrialSpec, instruction: str) -> dict:
    """ATIF as Harbor writes it: Terminus-2's bash_command calls (keystrokes, duration) with one
    screen per step and mark_task_complete; installed agents' calls with results by call id."""
    steps: list[dict] = [{"step_id": 1, "source": "user", "message": instruction}]
    if spec.agent == "terminus-2":
        keys = _keystrokes(spec)
        calls = [
            {
                "tool_call_id": f"call_{i}_1",
                "function_name": "bash_command",
                "arguments": {"keystrokes": k, "duration": d},
            }
            for i, (k, d) in enumerate(keys)
        ]
        for i, call in enumerate(calls):
            steps.append(
                {
                    "step_id": len(steps) + 1,
                    "source": "agent",
                    "model_name": spec.model,
                    "message": f"Analysis: step {i}. Plan: run it.",
                    "tool_calls": [call],
                    "observation": {
                        "results": [{"content": f"root@box:/app# {call['arguments']['keystrokes']}"}]
                    },
                    "metrics": {"prompt_tokens": 900, "completion_tokens": 60},
                }
            )
        steps.append(
            {
                "step_id": len(steps) + 1,
                "source": "agent",
                "message": "The task is complete.",
                "tool_calls": [
                    {
                        "tool_call_id": "call_9_task_complete",
                        "function_name": "mark_task_complete",
                        "arguments": {},
                    }
                ],
            }
        )
    else:
        for i, (name, args) in enumerate(_calls(spec)):
            cid = f"toolu_{spec.n}_{i}"
            steps.append(
                {
                    "step_id": len(steps) + 1,
                    "source": "agent",
                    "model_name": spec.model,
                    "message": f"Calling {name}.",
                    "tool_calls": [{"tool_call_id": cid, "function_name": name, "arguments": args}],
                    "observation": {"results": [{"source_call_id": cid, "content": "ok"}]},
                }
            )
        steps.append({"step_id": len(steps) + 1, "source": "agent", "message": "Done: the task is complete."})
    return {
        "schema_version": "ATIF-v1.4",
        "session_id": spec.uid,
        "agent": {"name": spec.agent, "version": "1.0.0", "model_name": spec.model},
        "steps": steps,
        "final_metrics": {"total_prompt_tokens": 1000, "total_completion_tokens": 100},
    }


def trial_config(spec: TrialSpec) -> dict:
    """TrialConfig as Harbor writes it for a registry dataset task (git task id)."""
    return {
        "task": {
            "path": f"tasks/{spec.task}",
            "git_url": "https://github.com/laude-institute/terminal-bench-2.git",
            "git_commit_id": "69671fbaac6d67a7ef0dfec016cc38a64ef7a77c",
            "overwrite": False,
            "download_dir": None,
            "source": "terminal-bench",
        },
        "trial_name": spec.trial,
        "trials_dir": f"jobs/{JOB}",
        "timeout_multiplier": 1.0,
        "agent": {
            "name": spec.agent,
            "import_path": None,
            "model_name": spec.model,
            "override_timeout_sec": None,
            "override_setup_timeout_sec": None,
            "max_timeout_sec": None,
            "kwargs": {},
        },
        "environment": {
            "type": "docker",
            "force_build": False,
            "delete": True,
            "override_cpus": None,
            "kwargs": {},
        },
        "verifier": {"override_timeout_sec": None, "max_timeout_sec": None, "disable": False},
        "job_id": str(uuid.uuid5(uuid.NAMESPACE_URL, spec.submission)),
    }


def _tests_of(task: str) -> list[str]:
    text = (task_dir(task) / "tests" / "test_outputs.py").read_text()
    return [
        line.split("def ", 1)[1].split("(", 1)[0]
        for line in text.splitlines()
        if line.startswith("def test_")
    ]


def trial_result(spec: TrialSpec, reward: float | None) -> dict:
    exc = EXCEPTIONS.get(spec.kind)
    provider, name = spec.model.split("/", 1)
    return {
        "id": spec.uid,
        "task_name": spec.task,
        "trial_name": spec.trial,
        "trial_uri": f"file:///jobs/{JOB}/{spec.trial}",
        "task_id": {
            "git_url": "https://github.com/laude-institute/terminal-bench-2.git",
            "git_commit_id": "69671fbaac6d67a7ef0dfec016cc38a64ef7a77c",
            "path": f"tasks/{spec.task}",
        },
        "source": "terminal-bench",
        "task_checksum": "e8ee9e8948d949d0abe46d431736d1cf04e8aab76d98fc9c819fb26960ab1352",
        "config": trial_config(spec),
        "agent_info": {
            "name": spec.agent,
            "version": "1.0.0",
            "model_info": {"name": name, "provider": provider},
        },
        "agent_result": {
            "n_input_tokens": 1000,
            "n_cache_tokens": 0,
            "n_output_tokens": 100,
            "cost_usd": 0.01,
        },
        "verifier_result": None if reward is None else {"rewards": {"reward": reward}},
        "exception_info": None
        if exc is None
        else {
            "exception_type": exc,
            "exception_message": f"{exc} raised",
            "exception_traceback": "Traceback (most recent call last):\n  ...",
            "occurred_at": "2025-11-01T10:05:00",
        },
        "started_at": "2025-11-01T10:00:00.000000",
        "finished_at": "2025-11-01T10:06:00.000000",
        "environment_setup": {"started_at": "2025-11-01T10:00:00", "finished_at": "2025-11-01T10:00:30"},
        "agent_setup": {"started_at": "2025-11-01T10:00:30", "finished_at": "2025-11-01T10:01:00"},
        "agent_execution": {"started_at": "2025-11-01T10:01:00", "finished_at": "2025-11-01T10:04:00"},
        "verifier": {"started_at": "2025-11-01T10:04:00", "finished_at": "2025-11-01T10:05:00"},
    }


def write_trial(job_dir: Path, spec: TrialSpec) -> Path:
    d = job_dir / spec.trial
    (d / "agent").mkdir(parents=True, exist_ok=True)
    instruction = (task_dir(spec.task) / "instruction.md").read_text()
    passed = spec.kind == "passed"
    reward = None if spec.kind in ("rate_limit", "crash", "verifier_timeout") else 1.0 if passed else 0.0
    (d / "config.json").write_text(json.dumps(trial_config(spec), indent=4))
    (d / "result.json").write_text(json.dumps(trial_result(spec, reward), indent=4))
    (d / "trial.log").write_text("trial log\n")
    traj = trajectory(spec, instruction)
    if spec.kind == "episodes":  # an older Terminus-2 run: episode logs, no ATIF file
        for i, (keys, dur) in enumerate(_keystrokes(spec)):
            e = d / "agent" / f"episode-{i}"
            e.mkdir()
            (e / "prompt.txt").write_text("Current terminal state:\nroot@box:/app#\n")
            answer = {
                "analysis": "a",
                "plan": "p",
                "commands": [{"keystrokes": keys, "duration": dur}],
                "task_complete": False,
            }
            (e / "response.txt").write_text(json.dumps(answer, indent=2))
        e = d / "agent" / f"episode-{len(_keystrokes(spec))}"
        e.mkdir()
        (e / "response.txt").write_text(
            json.dumps({"analysis": "done", "plan": "", "commands": [], "task_complete": True})
        )
    else:
        (d / "agent" / "trajectory.json").write_text(json.dumps(traj, indent=2))
    if spec.kind in ("rate_limit", "crash", "verifier_timeout"):
        (d / "exception.txt").write_text(f"{EXCEPTIONS[spec.kind]}: raised\n")
    if reward is not None:
        v = d / "verifier"
        v.mkdir()
        (v / "reward.txt").write_text(f"{int(reward)}\n")
        tests = _tests_of(spec.task)
        statuses = {t: "passed" if passed or i % 2 == 0 else "failed" for i, t in enumerate(tests)}
        ctrf = {
            "results": {
                "tool": {"name": "pytest", "version": "8.4.1"},
                "summary": {"tests": len(tests), "passed": sum(s == "passed" for s in statuses.values())},
                "tests": [
                    {"name": f"test_outputs.py::{t}", "status": s, "duration": 0.01}
                    for t, s in statuses.items()
                ],
            }
        }
        (v / "ctrf.json").write_text(json.dumps(ctrf, indent=2))
        (v / "test-stdout.txt").write_text(
            "".join(f"{s.upper()} test_outputs.py::{t}\n" for t, s in statuses.items())
        )
    return d


@dataclass
class Fixture:
    root: Path
    trials: list[TrialSpec] = field(default_factory=list)
    hostile: dict[str, str] = field(default_factory=dict)  # what each hostile entry is -> its path

    def expected(self) -> dict[str, str]:
        return {t.trial: t.expect for t in self.trials if t.expect is not None}


def _metadata(sub: str) -> str:
    agent, model, display, model_display, provider = SUBMISSIONS[sub]
    return (
        f"agent_url: https://example.invalid/{agent}\n"
        f'agent_display_name: "{display}"\n'
        f'agent_org_display_name: "{display} team"\n'
        "models:\n"
        f"  - model_name: {model.split('/', 1)[1]}\n"
        f"    model_provider: {provider}\n"
        f'    model_display_name: "{model_display}"\n'
        f'    model_org_display_name: "{provider}"\n'
    )


def make_leaderboard(root: Path, *, hostile: bool = False, specs: list[TrialSpec] | None = None) -> Fixture:
    root = Path(root)
    fx = Fixture(root, specs if specs is not None else default_specs())
    base = root / "submissions" / "terminal-bench" / VERSION
    for sub in dict.fromkeys(s.submission for s in fx.trials):
        sdir = base / sub
        job = sdir / JOB
        job.mkdir(parents=True, exist_ok=True)
        (sdir / "metadata.yaml").write_text(_metadata(sub))
        (job / "config.json").write_text(
            json.dumps({"job_name": JOB, "jobs_dir": "jobs", "n_attempts": 5}, indent=4)
        )
        mine = [s for s in fx.trials if s.submission == sub]
        (job / "result.json").write_text(
            json.dumps(
                {"id": str(uuid.uuid4()), "started_at": "2025-11-01T10:00:00", "n_total_trials": len(mine)}
            )
        )
        for spec in mine:
            write_trial(job, spec)
    (root / "README.md").write_text("# terminal-bench-2-leaderboard (fixture)\n")
    if hostile:
        _hostile(fx, base)
    return fx


def _hostile(fx: Fixture, base: Path) -> None:
    """A submission of hostile entries, each refused with one line (fx.hostile: name -> path)."""
    sub = base / "Evil__Model"
    job = sub / JOB
    job.mkdir(parents=True)
    (sub / "metadata.yaml").write_text('a: &x ["lol","lol"]\nb: [*x,*x,*x]\nmodels: [*x]\n')
    fx.hostile["metadata anchors"] = str(sub / "metadata.yaml")
    good = TrialSpec("Terminus2__GLM-4.7", "kv-service", "failed", 900)
    # 1. a trial dir that is a symlink (to a real trial elsewhere)
    real = write_trial(fx.root / "elsewhere", good)
    (job / "linked__trial01").symlink_to(real)
    fx.hostile["symlinked trial dir"] = str(job / "linked__trial01")
    # 2. a trial name that is no safe path component
    bad = job / "bad name;$(reboot)"
    bad.mkdir()
    (bad / "result.json").write_text("{}")
    fx.hostile["unsafe trial name"] = str(bad)
    # 3. result.json nested deeper than any reader goes
    deep = write_trial(job, TrialSpec("Terminus2__GLM-4.7", "kv-service", "failed", 901))
    (deep / "result.json").write_text(
        '{"trial_name": "x", "agent_info": ' + "[" * 100_000 + "]" * 100_000 + "}"
    )
    fx.hostile["deep result.json"] = str(deep / "result.json")
    # 4. result.json over its bound (sparse: no disk spent)
    big = write_trial(job, TrialSpec("Terminus2__GLM-4.7", "kv-service", "failed", 902))
    with open(big / "result.json", "r+b") as fh:
        fh.truncate(17 << 20)
    fx.hostile["huge result.json"] = str(big / "result.json")
    # 5. a FIFO where config.json belongs (reading it must not block)
    fifo = write_trial(job, TrialSpec("Terminus2__GLM-4.7", "kv-service", "failed", 903))
    (fifo / "config.json").unlink()
    os.mkfifo(fifo / "config.json")
    fx.hostile["fifo config.json"] = str(fifo / "config.json")
    # 6. a trial imported, but whose trajectory and ctrf.json are symlinks out of the tree and whose
    #    verifier dir holds a FIFO: each is one line, the trial itself is imported (no trajectory)
    links_spec = TrialSpec("Terminus2__GLM-4.7", "notify-relay", "failed", 904, "no_change")
    links = write_trial(job, links_spec)
    (links / "agent" / "trajectory.json").unlink()
    (links / "agent" / "trajectory.json").symlink_to("/etc/passwd")
    (links / "verifier" / "ctrf.json").unlink()
    (links / "verifier" / "ctrf.json").symlink_to("/etc/shadow")
    os.mkfifo(links / "verifier" / "pipe")
    fx.hostile["symlinked trajectory"] = str(links / "agent" / "trajectory.json")
    fx.hostile["symlinked ctrf"] = str(links / "verifier" / "ctrf.json")
    fx.hostile["verifier fifo"] = str(links / "verifier" / "pipe")
    # 7. a task name that tries to leave the tasks dir
    trav = write_trial(job, TrialSpec("Terminus2__GLM-4.7", "kv-service", "failed", 905))
    data = json.loads((trav / "result.json").read_text())
    data["task_name"] = "../../../etc"
    data["task_id"] = {"path": "../../../etc"}
    data["config"]["task"]["path"] = "../../../etc"
    (trav / "result.json").write_text(json.dumps(data))
    cfg = json.loads((trav / "config.json").read_text())
    cfg["task"]["path"] = "../../../etc"
    (trav / "config.json").write_text(json.dumps(cfg))
    fx.hostile["task name traversal"] = str(trav / "result.json")
    # 8. started, never finished: config.json without result.json
    unfinished = write_trial(job, TrialSpec("Terminus2__GLM-4.7", "kv-service", "failed", 906))
    (unfinished / "result.json").unlink()
    fx.hostile["unfinished"] = str(unfinished)
    # 9. keystrokes longer than one interaction holds: imported, but cannot be replayed
    long_ = TrialSpec("Terminus2__GLM-4.7", "sales-report", "failed", 907, "candidate")
    d = write_trial(job, long_)
    traj = json.loads((d / "agent" / "trajectory.json").read_text())
    traj["steps"][1]["tool_calls"][0]["arguments"]["keystrokes"] = "echo " + "x" * (1 << 20) + "\n"
    (d / "agent" / "trajectory.json").write_text(json.dumps(traj))
    fx.hostile["huge keystrokes"] = str(d / "agent" / "trajectory.json")
    fx.trials += [links_spec, long_]


def make_git_repo(root: Path, dest: Path) -> str:
    """The tree as a bare git repository (what `git clone` of the dataset gives); its file:// URL.
    FIFOs cannot be committed and stay out; symlinks are committed as symlinks."""
    work = Path(dest) / "work"
    shutil.copytree(
        root, work, symlinks=True, ignore=lambda d, names: [n for n in names if _is_fifo(Path(d) / n)]
    )
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t.invalid",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t.invalid",
    }
    for cmd in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "trials"]):
        subprocess.run(["git", "-C", str(work), *cmd], check=True, env=env, capture_output=True)
    bare = Path(dest) / "leaderboard.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(bare)], check=True, capture_output=True)
    subprocess.run(["git", "-C", str(bare), "config", "uploadpack.allowFilter", "true"], check=True)
    return f"file://{bare}"


def _is_fifo(p: Path) -> bool:
    import stat

    try:
        return stat.S_ISFIFO(p.lstat().st_mode)
    except OSError:
        return False


# -- the Hugging Face dataset API on 127.0.0.1 ----------------------------------------------------


class HubServer(http.server.ThreadingHTTPServer):
    """GET /api/datasets/<repo>/tree/<rev>/<path>?cursor=N   a dir's entries, PAGE at a time, the
                                                            next page in a Link header (as the Hub)
       GET /datasets/<repo>/resolve/<rev>/<path>            a file's bytes; 404 when missing
    Symlinks are listed with type "symlink" (no Hub type) and never served; FIFOs are not listed."""

    daemon_threads = True
    allow_reuse_address = True
    PAGE = 10  # the Hub pages at 1000; small here so that every listing of a job is paged

    def __init__(self, root: Path):
        self.root = Path(root).resolve()
        self.requests: list[str] = []
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _HubHandler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    @property
    def dataset_url(self) -> str:
        return f"{self.url}/datasets/{DATASET}"

    def handle_error(self, request, client_address) -> None:
        pass


class _HubHandler(http.server.BaseHTTPRequestHandler):
    server: HubServer
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass

    def _send(self, code: int, body: bytes, ctype: str = "application/json", link: str | None = None) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        if link:
            self.send_header("Link", link)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802
        srv = self.server
        parts = urllib.parse.urlsplit(self.path)
        path = urllib.parse.unquote(parts.path)
        with srv.lock:
            srv.requests.append(urllib.parse.unquote(self.path))
        api, res = f"/api/datasets/{DATASET}/tree/main", f"/datasets/{DATASET}/resolve/main/"
        if path == api or path.startswith(api + "/"):
            rel = path[len(api) :].strip("/")
            d = srv.root / rel
            if ".." in rel.split("/") or not d.is_dir() or d.is_symlink():
                return self._send(404, b'{"error": "Entry not found"}')
            entries = []
            for e in sorted(os.scandir(d), key=lambda e: e.name):
                p = f"{rel}/{e.name}".lstrip("/")
                if e.is_symlink():
                    entries.append({"type": "symlink", "path": p, "oid": "0" * 40, "size": 0})
                elif e.is_dir():
                    entries.append({"type": "directory", "path": p, "oid": "0" * 40, "size": 0})
                elif e.is_file():
                    entries.append({"type": "file", "path": p, "oid": "0" * 40, "size": e.stat().st_size})
            cursor = int(urllib.parse.parse_qs(parts.query).get("cursor", ["0"])[0])
            page = entries[cursor : cursor + srv.PAGE]
            link = None
            if cursor + srv.PAGE < len(entries):
                link = f'<{srv.url}{parts.path}?expand=false&cursor={cursor + srv.PAGE}>; rel="next"'
            return self._send(200, json.dumps(page).encode(), link=link)
        if path.startswith(res):
            rel = path[len(res) :]
            p = srv.root / rel
            if ".." in rel.split("/") or p.is_symlink() or not p.is_file():
                return self._send(404, b'{"error": "Entry not found"}')
            return self._send(200, p.read_bytes(), "application/octet-stream")
        return self._send(404, b"{}")


@contextlib.contextmanager
def serve(root: Path):
    srv = HubServer(root)
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(timeout=10)


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()

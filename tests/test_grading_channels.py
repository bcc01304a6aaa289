"""Grading reads only what the task declares, after every process of the verifier is gone, and a
report the agent's code broke is the agent's failure (never infra) - through real suite runs.

Each attack is a `command:` agent that appends code to calc.py, which the hidden tests import, so
the code runs inside the verifier; none of them solves the task (sub and div stay missing), so
every honest grade is outcome 0.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from .taskfactory import docker_task, make_task, partial_state_patch, state_entry, write_states

ROOT = Path(__file__).resolve().parent.parent

# a JUnit report in which every hidden test passed (the ids the calc task grades)
PASSING = ("<testsuite><testcase classname='tests.test_new' name='test_sub'/><testcase classname='tests.test_new' "
           "name='test_div'/><testcase classname='tests.test_new' name='test_div_by_zero'/>"
           "<testcase classname='tests.test_old' name='test_add'/></testsuite>")
LOGS = "os.environ.get('LOGS_DIR', '/logs/verifier')"
ATTACKS = {
    # an extra report next to the declared one, named to sort after it (the old reader merged
    # every *.xml in name order, so this one won)
    "extra-report": f"import os; open({LOGS} + '/zz-extra.xml', 'w').write({PASSING!r})",
    # a process that outlives the test run and rewrites the declared report once pytest wrote it
    "late-writer": ("import os, time\n"
                    "if os.fork() == 0:\n"
                    "    os.setsid()\n"
                    "    if os.fork() == 0:\n"
                    f"        time.sleep(3); open({LOGS} + '/junit.xml', 'w').write({PASSING!r}); os._exit(0)\n"
                    "    os._exit(0)"),
    # a directory where the declared report belongs: pytest cannot write it, the reader must not crash
    "report-dir": f"import os; os.makedirs({LOGS} + '/junit.xml', exist_ok=True)",
}


def _world(tmp: Path, backend: str) -> None:
    task = (docker_task if backend == "docker" else make_task)(tmp)
    write_states(tmp, [state_entry(tmp, task, partial_state_patch(task))])
    agents = {name: {"harness": "command", "command": f"printf '%s\\n' {shlex.quote(code)} >> calc.py"}
              for name, code in ATTACKS.items()}
    (tmp / "agents.yaml").write_text(json.dumps({"agents": agents}))


def _run(tmp: Path, backend: str) -> tuple[subprocess.CompletedProcess, dict[str, dict]]:
    cmd = [sys.executable, "-m", "pytest", "suites/demo", "--tasks-dir", str(tmp / "tasks"), "--states",
           str(tmp / "states.yaml"), "--run-dir", str(tmp / "run"), "--agent-config", str(tmp / "agents.yaml"),
           "--backend", backend, "--start", "clean", "-n", "2", "-p", "no:randomly",
           *[a for name in ATTACKS for a in ("--agent", name)]]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900, env=dict(os.environ))
    lines = (tmp / "run" / "results.jsonl").read_text().splitlines()
    return proc, {r["case_id"]: r for r in map(json.loads, lines)}


@pytest.mark.parametrize("backend", ["local", pytest.param("docker", marks=pytest.mark.docker)])
def test_forged_or_broken_reports_never_pass_and_never_become_infra(tmp_path, backend):
    if backend == "docker":
        from .docker_helpers import require_docker
        require_docker()
    _world(tmp_path, backend)
    proc, recs = _run(tmp_path, backend)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-2000:]     # test failures, no errors
    assert sorted(recs) == sorted(f"{name}-calc-clean" for name in ATTACKS)     # one attempt each
    for name in ("extra-report", "late-writer"):
        r = recs[f"{name}-calc-clean"]
        # graded from the declared report as pytest wrote it: sub and div are missing
        assert (r["rule"], r["verdict"], r["outcome"]) == ("verdict", "fail", 0), r
        assert r["tests"]["tests.test_new.test_sub"] == "failed", r["tests"]
    broken = recs["report-dir-calc-clean"]
    # the verifier fails twice on the agent's state and works on the reference: the agent's failure
    assert (broken["rule"], broken["verdict"], broken["outcome"]) == ("verifier_agent_caused", "fail", 0), broken
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert all(summary["tracks"]["demo"][name]["clean"] == 0.0 for name in ATTACKS)


# Work without bounds the harness must refuse quickly, as the agent's failure: a final tree of
# more files than a final state may hold, and a fifo in the repository that would block git.
UNBOUNDED = {
    "many-files": "mkdir -p junk && cd junk && seq 1 100001 | xargs touch",
    "fifo-in-git": "mkfifo .git/objects/ab && mkfifo .git/refs/heads/blocked",
}


@pytest.mark.parametrize("backend", ["local", pytest.param("docker", marks=pytest.mark.docker)])
def test_unbounded_final_states_end_quickly_as_the_agents_failure(tmp_path, backend):
    if backend == "docker":
        from .docker_helpers import require_docker
        require_docker()
    task = (docker_task if backend == "docker" else make_task)(tmp_path)
    write_states(tmp_path, [state_entry(tmp_path, task, partial_state_patch(task))])
    (tmp_path / "agents.yaml").write_text(json.dumps({"agents": {
        name: {"harness": "command", "command": cmd} for name, cmd in UNBOUNDED.items()}}))
    cmd = [sys.executable, "-m", "pytest", "suites/demo", "--tasks-dir", str(tmp_path / "tasks"), "--states",
           str(tmp_path / "states.yaml"), "--run-dir", str(tmp_path / "run"), "--agent-config",
           str(tmp_path / "agents.yaml"), "--backend", backend, "--start", "clean", "-n", "2", "-p", "no:randomly",
           *[a for name in UNBOUNDED for a in ("--agent", name)]]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-2000:]
    recs = {r["case_id"]: r for r in map(json.loads, (tmp_path / "run" / "results.jsonl").read_text().splitlines())}
    assert sorted(recs) == sorted(f"{name}-calc-clean" for name in UNBOUNDED)
    why = {"many-files": "more than 100000 files", "fifo-in-git": "holds a special file"}
    for name in UNBOUNDED:
        r = recs[f"{name}-calc-clean"]
        assert (r["rule"], r["verdict"], r["outcome"]) == ("verifier_agent_caused", "fail", 0), r
        assert why[name] in r["verdict_note"], r["verdict_note"]
        # the task's limits are 60 s for the agent and 60 s for the verifier: well within them + 60 s
        assert r["duration_s"] < 60 + 60 + 60, r["duration_s"]


@pytest.mark.docker
def test_an_agent_that_ends_its_containers_pid_1_is_graded(tmp_path):
    from .docker_helpers import require_docker
    require_docker()
    task = docker_task(tmp_path)
    write_states(tmp_path, [state_entry(tmp_path, task, partial_state_patch(task))])
    # appends to calc.py, then stops the container's init: the state on disk is what is graded
    (tmp_path / "agents.yaml").write_text(json.dumps({"agents": {
        "ends-pid-1": {"harness": "command", "command": "echo '# touched' >> calc.py; kill -TERM 1; sleep 2"}}}))
    cmd = [sys.executable, "-m", "pytest", "suites/demo", "--tasks-dir", str(tmp_path / "tasks"), "--states",
           str(tmp_path / "states.yaml"), "--run-dir", str(tmp_path / "run"), "--agent-config",
           str(tmp_path / "agents.yaml"), "--backend", "docker", "--agent", "ends-pid-1", "-p", "no:randomly"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-2000:]       # failures, not errors
    recs = [json.loads(line) for line in (tmp_path / "run" / "results.jsonl").read_text().splitlines()]
    assert len(recs) == 2 and all(r["attempt"] == 1 for r in recs)               # never rerun as infra
    for r in recs:
        # its own command died with the container: the agent's error, counted, outcome from the verifier
        assert (r["rule"], r["verdict"], r["outcome"]) == ("agent_error", "fail", 0), r
        patch = (tmp_path / "run" / r["artifacts"]["patch"]).read_text()
        assert "+# touched" in patch                                             # its change was graded

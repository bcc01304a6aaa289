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

"""Machine states against the real Docker engine (no mocks): the CRIU probe's answer on this
machine, commit-restart snapshots and their restore - live processes running and answering, pid
files, a service whose configuration changed after it started, independent instances - replay
divergence and determinism, and validation failing with one line when a process is gone."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from pathlib import Path

import pytest
import yaml

from swe_residual.backends.docker import criu
from swe_residual.backends.docker.backend import DockerBackend
from swe_residual.backends.docker.engine import LABEL_CASE, LABEL_RUN
from swe_residual.errors import ReplayError, RestoreError
from swe_residual.states import load_states
from swe_residual.tasks import load_tasks

try:
    from docker_helpers import bookworm_image, docker_client  # noqa: F401  (fixtures)
except ImportError:  # tests/ is a package
    from tests.docker_helpers import bookworm_image, docker_client  # noqa: F401  (fixtures)

from .drivers import cli, records, run_suite

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parent.parent
TB = ROOT / "suites" / "terminal_bench"
RUN = f"swe-test-machine-{os.getpid()}"


@pytest.fixture(scope="module")
def tasks():
    return load_tasks(TB / "tasks", "terminal_bench")


@pytest.fixture(scope="module")
def bundled(tasks):
    return {
        s.id: s
        for s in load_states(ROOT / "states.yaml", {"terminal_bench": tasks}, tracks={"terminal_bench"})
    }


@pytest.fixture(scope="module")
def backend(docker_client, bookworm_image):
    b = DockerBackend(run_id=RUN)
    yield b
    b.close()
    left = docker_client.api.containers(all=True, filters={"label": f"{LABEL_RUN}={RUN}"})
    assert not left, f"containers left behind: {[c['Id'][:12] for c in left]}"


def variant(tmp_path: Path, tasks, base: str | None, task: str, extra: list[dict], **artifact):
    """A state made of a bundled state's interactions (if any) plus `extra` ones, in its own states file."""
    src = TB / "states" / task / f"{base}.interactions.jsonl"
    lines = (src.read_text() if base else "") + "".join(json.dumps(e) + "\n" for e in extra)
    (tmp_path / "s").mkdir(exist_ok=True)
    name = hashlib.sha256(lines.encode()).hexdigest()[:8]
    (tmp_path / "s" / f"{name}.jsonl").write_text(lines)
    entry = {
        "id": f"{task}--{name}",
        "track": "terminal_bench",
        "task": task,
        "predecessor": {"agent": "test", "model_family": "test"},
        "artifact": {
            "interactions": f"s/{name}.jsonl",
            "sha256": hashlib.sha256(lines.encode()).hexdigest(),
            **artifact,
        },
        "initial_verdict": {"failing_tests": ["test_outputs.test_guest_is_web01"]},
    }
    path = tmp_path / "states.yaml"
    path.write_text(yaml.safe_dump({"states": [entry]}))
    return path, load_states(path, {"terminal_bench": tasks})[0]


def test_criu_probe_says_no_on_this_machine_and_is_asked_once_per_engine(
    backend, docker_client, bookworm_image, tmp_path, monkeypatch
):
    if docker_client.api.info().get("ExperimentalBuild"):
        pytest.skip("this engine runs with --experimental: the probe's negative answer cannot be shown here")
    monkeypatch.setattr(backend.engine, "cache_dir", tmp_path)  # no earlier answer on disk
    monkeypatch.setattr(criu, "_memo", {})
    first = criu.probe(backend.engine, bookworm_image)
    assert not first.available and not first.cached
    # the daemon's own reason, in one line: checkpoints need an experimental daemon
    assert first.reason.startswith("docker checkpoint is unavailable: ") and "experimental" in first.reason
    assert "\n" not in first.reason
    assert json.loads(next((tmp_path / "criu").glob("*.json")).read_text())["available"] is False
    # asked again (this process, then another one reading the disk): no probe container is made
    again = criu.probe(backend.engine, bookworm_image)
    monkeypatch.setattr(criu, "_memo", {})
    from_disk = criu.probe(backend.engine, bookworm_image)
    assert (again.cached, from_disk.cached, from_disk.reason) == (True, True, first.reason)
    # the probe container is gone (only this backend's: other processes may probe their engine now)
    assert (
        docker_client.api.containers(
            all=True, filters={"label": [f"{LABEL_CASE}=criu-probe", f"{LABEL_RUN}={RUN}"]}
        )
        == []
    )
    assert criu.choose_method(backend.engine, bookworm_image) == ("commit-restart", again)
    monkeypatch.setenv(criu.METHOD_ENV, "criu")
    with pytest.raises(Exception, match=r"SWE_RESIDUAL_SNAPSHOT=criu but this engine cannot checkpoint"):
        criu.choose_method(backend.engine, bookworm_image)


def _sh(env, command: str) -> str:
    res = env.execute(command, timeout=60)
    assert res.exit_code == 0, res.output
    return res.output


CONSOLE = (
    "python3 -c \"import socket,sys; s=socket.create_connection(('127.0.0.1',%d),5); f=s.makefile('rw'); "
    "print(f.readline().strip()); f.write(sys.argv[1]+'\\n'); f.flush(); print(f.readline().strip())\" '%s'"
)


def test_long_running_process_runs_and_answers_after_restore(backend, tasks, bundled):
    task, state = tasks["vm-console"], bundled["vm-console--rescue-image-128mb"]
    snap = backend.machine.snapshot(task, state)
    assert snap.method == "commit-restart" and "experimental" in snap.criu_probe
    assert snap.deterministic, snap.differences
    [emu] = snap.processes  # typed into a terminal: the harness's tmux is not part of the state
    assert emu.argv[:2] == ["python3", "/opt/emu/emu.py"] and "128" in emu.argv
    assert [p.port for p in emu.ports] == [4555] and emu.stdout == "/var/log/emu/web01.log"
    one, two = backend.materialize(task, state), backend.materialize(task, state)
    try:
        assert one.report["method"] == "commit-restart" and one.report["restore_s"] > 0
        # the VM runs again and its console answers, with the arguments it was started with
        assert _sh(one, CONSOLE % (4555, "free -m")).split("\n")[:2] == [
            "Rescue System 3.1 rescue ttyS0",
            "Mem: 128",
        ]
        # the pid file names the restarted process, not the one of the replay
        pid = _sh(one, "cat /run/emu/web01.pid").strip()
        assert pid == str(one.report["processes"][0]["pid"]) != str(emu.pid)
        assert "emu.py" in _sh(one, f"tr '\\0' ' ' < /proc/{pid}/cmdline")
        # every continuation has its own instance
        _sh(one, "touch /root/only-in-one && kill $(cat /run/emu/web01.pid)")
        assert _sh(two, "ls /root; " + CONSOLE % (4555, "hostname")).split() == [
            "Rescue",
            "System",
            "3.1",
            "rescue",
            "ttyS0",
            "rescue",
        ]
    finally:
        one.close()
        two.close()


def test_a_service_whose_config_changed_after_it_started_comes_back_with_the_config_it_read(
    backend, tasks, bundled
):
    task, state = tasks["kv-service"], bundled["kv-service--config-not-reloaded"]
    snap = backend.machine.snapshot(task, state)
    # the service started at interaction 1; the configuration was edited after it (interaction 3)
    assert [st.interaction for st in snap.stages] == [1] and snap.base_image and snap.final_delta
    env = backend.materialize(task, state)
    try:
        assert "port = 7070" in _sh(env, "cat /etc/kvstore/kvstore.conf")
        health = 'python3 -c "import urllib.request,sys; print(urllib.request.urlopen(sys.argv[1],timeout=3).read())"'
        assert _sh(env, f"{health} http://127.0.0.1:8000/health").strip() == "b'ok\\n'"
        assert env.execute(f"{health} http://127.0.0.1:7070/health", timeout=60).exit_code != 0
        assert _sh(env, "test -d /srv/kvstore && echo yes").strip() == "yes"
    finally:
        env.close()


def test_replay_that_does_not_reproduce_the_recording_is_a_replay_error(backend, tasks, tmp_path):
    _, state = variant(
        tmp_path,
        tasks,
        "top-level-only",
        "sales-report",
        [{"kind": "command", "input": "test -f /data/out/never-written.json", "exit_status": 0}],
    )
    with pytest.raises(ReplayError) as err:
        backend.machine.snapshot(tasks["sales-report"], state)
    assert str(err.value).startswith(
        f"state {state.id}: interaction 4 (command 'test -f /data/out/never-written"
        ".json') exited 1 on replay, 0 when recorded"
    )


def test_non_deterministic_replays_are_reported_and_volatile_paths_accept_them(backend, tasks, tmp_path):
    stamp = [{"kind": "command", "input": "date +%s%N > /root/stamp", "exit_status": 0}]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    _, state = variant(tmp_path / "a", tasks, "top-level-only", "sales-report", stamp)
    snap = backend.machine.snapshot(tasks["sales-report"], state)
    assert snap.deterministic is False and snap.differences == ["/root/stamp: content differs"]
    _, state = variant(
        tmp_path / "b", tasks, "top-level-only", "sales-report", stamp, volatile_paths=["/root/stamp"]
    )
    snap = backend.machine.snapshot(tasks["sales-report"], state)
    assert snap.deterministic is True and snap.differences == []


def test_a_recorded_process_that_cannot_come_back_is_a_restore_error(backend, tasks, tmp_path):
    # the emulator runs from a tmpfs (/dev/shm): a committed filesystem does not hold it, so the
    # recorded process cannot be started again - a limit of commit-restart that restore reports
    start = (
        "mkdir -p /dev/shm/vm && cp /opt/emu/emu.py /dev/shm/vm/ && nohup python3 /dev/shm/vm/emu.py -m 512 "
        "-drive file=/srv/vm/web01.img -serial tcp:127.0.0.1:4555,server,nowait >/dev/null 2>&1 &"
    )
    _, state = variant(
        tmp_path,
        tasks,
        None,
        "vm-console",
        [
            {"kind": "command", "input": start, "exit_status": 0},
            {"kind": "command", "input": "sleep 1", "exit_status": 0},
        ],
    )
    # the background list's subshell is not started again, the emulator it ran is
    [emu] = backend.machine.snapshot(tasks["vm-console"], state).processes
    assert emu.argv[:2] == ["python3", "/dev/shm/vm/emu.py"]
    assert emu.label == "python3 /dev/shm/vm/emu.py -m 512 -drive file=/srv/vm/web01.img -serial tcp:1..."
    with pytest.raises(RestoreError) as err:
        backend.materialize(tasks["vm-console"], state)
    assert str(err.value) == (
        f"state {state.id}: after restore, process `{emu.label}` exited right after it was started"
    )


def test_the_containers_own_init_restarting_its_idle_child_is_never_part_of_a_state(backend, tasks, tmp_path):
    # The harness's keepalive (pid 1) forks its idle `sleep` when the container starts - at times
    # only after the replay's first look at the processes - and again when it is killed: neither
    # is a process the state started, in either replay.
    _, state = variant(
        tmp_path,
        tasks,
        None,
        "vm-console",
        [
            {"kind": "command", "input": "pkill -xf 'sleep 86400'", "exit_status": 0},
            {
                "kind": "command",
                "input": "until pgrep -xf 'sleep 86400'; do sleep 0.1; done",
                "exit_status": 0,
            },
        ],
    )
    snap = backend.machine.snapshot(tasks["vm-console"], state)
    assert (snap.processes, snap.deterministic, snap.differences) == ([], True, [])


def test_a_declared_live_process_that_binds_its_port_late_is_recorded_listening(backend, tasks, tmp_path):
    # the command returns at once, the server listens 6 s later: the snapshot waits for the
    # condition the state declares (running and listening), not for a time
    server = (
        "nohup python3 -c 'import socket,time; time.sleep(6); s=socket.socket(); "
        's.bind(("127.0.0.1", 4599)); s.listen(); time.sleep(1e6)\' late-bind >/dev/null 2>&1 &'
    )
    _, state = variant(
        tmp_path,
        tasks,
        None,
        "vm-console",
        [{"kind": "command", "input": server, "exit_status": 0}],
        live_processes=[{"match": "late-bind", "ports": [4599]}],
    )
    snap = backend.machine.snapshot(tasks["vm-console"], state)
    [late] = snap.processes
    assert (late.argv[-1], [p.port for p in late.ports], snap.deterministic) == ("late-bind", [4599], True)
    env = backend.materialize(tasks["vm-console"], state)
    try:
        assert env.execute("exec 3<>/dev/tcp/127.0.0.1/4599 && echo up", timeout=60).output.strip() == "up"
    finally:
        env.close()


def test_validation_fails_with_one_line_when_the_live_process_is_killed_in_the_snapshot(
    backend, tasks, tmp_path
):
    path, state = variant(
        tmp_path,
        tasks,
        "rescue-image-128mb",
        "vm-console",
        [{"kind": "keys", "input": "pkill -f emu.py\n", "wait": 0.5}],
        live_processes=[{"match": "emu.py", "ports": [4555]}],
    )
    proc = cli(
        "validate", "--track", "terminal_bench", "--states", str(path), "--run-dir", str(tmp_path / "v")
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    at = lines.index(f"FAIL {state.id}  (hidden tests passing on the state: n/a)")
    assert lines[at + 1].startswith("     snapshot commit-restart: built in ")
    assert lines[at + 2] == (
        f"     - state {state.id}: after restore, the expected live process 'emu.py' "
        "(ports 4555) is not running"
    )
    assert lines[-1] == "0/1 states valid"
    shutil.rmtree(tmp_path / "v", ignore_errors=True)


def test_suite_oracle_solves_every_state_nop_fails_them_and_terminus_repairs_kv_service(
    docker_client, bookworm_image, tmp_path
):
    # `pytest suites/terminal_bench --backend docker --agent oracle --agent nop -n 2`, with the
    # scripted terminal agent as a third agent; containers are labelled with the run dir's name,
    # which no other test's run may share while this one's engine is read below
    run = tmp_path / "machine-suite-run"
    proc = run_suite(
        "-q",
        suite=TB,
        backend="docker",
        agents=["oracle", "nop", "scripted-terminus"],
        workers=2,
        run_dir=run,
        timeout=1800,
    )
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]  # failures, no errors
    assert " error" not in proc.stdout.splitlines()[-1], proc.stdout.splitlines()[-1]
    every = records(run)
    # an attempt that met an infra fault (a package mirror that did not answer) is retried: the
    # case's last attempt is its result, every earlier one an infra error
    last = {r["case_id"]: r for r in sorted(every, key=lambda r: r["attempt"])}
    assert all(r["verdict"] == "infra_error" for r in every if r is not last[r["case_id"]])
    recs = list(last.values())
    states = yaml.safe_load((ROOT / "states.yaml").read_text())["states"]
    tb = {s["id"]: s for s in states if s["track"] == "terminal_bench"}
    tasks = sorted({s["task"] for s in tb.values()})
    assert len(tasks) >= 5 and all(1 <= sum(s["task"] == t for s in tb.values()) <= 2 for t in tasks)
    assert len(recs) == 3 * (len(tasks) + len(tb)), [r["case_id"] for r in recs]
    for r in recs:
        assert r["verdict"] != "infra_error" and r["rule"] == "verdict", (r["case_id"], r["error"])
        solved = r["agent"] == "oracle" or (r["agent"] == "scripted-terminus" and r["task"] == "kv-service")
        assert r["outcome"] == int(solved), r["case_id"]
        assert r["artifacts"]["changes"].endswith("final.changes")  # verified in the agent's container
        if r["start"] == "residual":
            snap = json.loads((run / r["artifacts"]["snapshot"]).read_text())
            assert (
                snap["state"] == r["state"] and snap["method"] == "commit-restart" and snap["restore_s"] > 0
            )
            if r["agent"] == "nop":
                # nop submits the state as it is: its failing tests are the recorded ones
                failing = sorted(t for t, st in r["tests"].items() if st != "passed")
                assert failing == tb[r["state"]]["initial_verdict"]["failing_tests"], r["case_id"]
    oracle = next(r for r in recs if r["agent"] == "oracle" and r["start"] == "residual")
    steps = [
        json.loads(line) for line in (run / oracle["artifacts"]["interactions"]).read_text().splitlines()
    ]
    assert steps == [
        {
            "kind": "command",
            "input": 'bash "/solution/solve.sh"',
            "exit_status": 0,
            "output_sha256": steps[0]["output_sha256"],
            "timeout": steps[0]["timeout"],
            "duration_s": steps[0]["duration_s"],
        }
    ]
    assert docker_client.api.containers(all=True, filters={"label": f"{LABEL_RUN}={run.name}"}) == []


TB2_TEST_SH = """#!/bin/bash
# Terminal-Bench 2 style: pytest's results as CTRF json, and a reward
cd /tests
python3 - <<'PY'
import json, subprocess, sys, xml.etree.ElementTree as ET
subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--junitxml=/tmp/j.xml",
                "/tests/test_outputs.py"])
tests = [{"name": c.get("name"), "status": "failed" if c.find("failure") is not None or c.find("error") is not None
          else "passed"} for c in ET.parse("/tmp/j.xml").getroot().iter("testcase")]
json.dump({"results": {"tool": {"name": "pytest"}, "summary": {"tests": len(tests)}, "tests": tests}},
          open("/logs/verifier/ctrf.json", "w"))
PY
if grep -q '"failed"' /logs/verifier/ctrf.json; then echo 0 > /logs/verifier/reward.txt; else echo 1 > /logs/verifier/reward.txt; fi
"""


def test_published_layout_task_dirs_run_unchanged_from_tasks_dir(docker_client, bookworm_image, tmp_path):
    """A task dir as Terminal-Bench 2 publishes it (no task_id: the dir name is the id; legacy
    `memory = "2G"`; a test.sh writing CTRF and reward.txt) with its own states file."""
    task = tmp_path / "tasks" / "sales-summary"
    shutil.copytree(TB / "tasks" / "sales-report", task)
    (task / "task.toml").write_text(
        'version = "1.0"\n\n[metadata]\nauthor_name = "someone"\ndifficulty = "easy"\n'
        'category = "data-processing"\n\n[verifier]\ntimeout_sec = 120.0\n\n[agent]\n'
        "timeout_sec = 600.0\n\n[environment]\nbuild_timeout_sec = 600.0\ncpus = 1\n"
        'memory = "2G"\nstorage = "10G"\n'
    )
    (task / "tests" / "test.sh").write_text(TB2_TEST_SH)
    src = TB / "states" / "sales-report" / "top-level-only.interactions.jsonl"
    shutil.copy(src, tmp_path / "top-level.jsonl")
    path = tmp_path / "states.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "states": [
                    {
                        "id": "sales-summary--top-level",
                        "track": "terminal_bench",
                        "task": "sales-summary",
                        "predecessor": {"agent": "test", "model_family": "test"},
                        "artifact": {
                            "interactions": "top-level.jsonl",
                            "sha256": hashlib.sha256(src.read_bytes()).hexdigest(),
                        },
                        "initial_verdict": {
                            "failing_tests": [
                                "test_every_input_file_is_listed",
                                "test_region_totals",
                                "test_row_count",
                            ]
                        },
                    }
                ]
            }
        )
    )
    run = tmp_path / "run"
    proc = run_suite(
        "-q",
        "--tasks-dir",
        str(tmp_path / "tasks"),
        "--states",
        str(path),
        suite=TB,
        agents=["oracle", "nop"],
        run_dir=run,
        timeout=1800,
    )
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = {}
    for r in records(run):
        out[r["case_id"]] = (r["outcome"], sorted(t for t, s in r["tests"].items() if s != "passed"))
    # graded from ctrf.json (test names as CTRF gives them) and reward.txt
    assert out == {
        "oracle-sales-summary-clean": (1, []),
        "oracle-sales-summary-residual-sales-summary--top-level": (1, []),
        "nop-sales-summary-clean": (
            0,
            [
                "test_amounts_are_rounded_to_cents",
                "test_every_input_file_is_listed",
                "test_region_totals",
                "test_report_exists",
                "test_report_has_the_fields",
                "test_row_count",
            ],
        ),
        "nop-sales-summary-residual-sales-summary--top-level": (
            0,
            ["test_every_input_file_is_listed", "test_region_totals", "test_row_count"],
        ),
    }


def test_keystrokes_still_running_when_their_wait_ends_finish_before_the_snapshot(backend, tasks, tmp_path):
    """A predecessor typed a slow command, then another ahead of it, each with a short duration (as
    a Terminus-2 run that read the screen early): the replay lets both run to their end, in order,
    before the machine is recorded, the same in both replays."""
    mark = uuid.uuid4().hex  # a state of its own: never one the engine's snapshot cache holds
    typed = [
        {"kind": "keys", "input": f"sleep 12; echo {mark} > /root/artifact\n", "wait": 0.2},
        {"kind": "keys", "input": "cp /root/artifact /root/installed\n", "wait": 0.2},
    ]
    _, state = variant(tmp_path, tasks, "top-level-only", "sales-report", typed)
    snap = backend.machine.snapshot(tasks["sales-report"], state)
    assert snap.deterministic is True, snap.differences
    env = backend.materialize(tasks["sales-report"], state)
    try:
        assert _sh(env, "cat /root/artifact /root/installed") == f"{mark}\n{mark}\n"
    finally:
        env.close()

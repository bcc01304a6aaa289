"""The Docker backend against the real engine (no mocks): images, isolation, verification in both
Harbor modes, the DeepSWE-shaped fixture task, leftover sweeping, and equality with the local backend.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest
import yaml

from swe_residual.agents import Agent, AgentContext, AgentRegistry, AgentResult
from swe_residual.backends import repo
from swe_residual.backends.docker.backend import DockerBackend
from swe_residual.backends.docker.engine import LABEL_PID, LABEL_RUN
from swe_residual.backends.workspace import final_state
from swe_residual.errors import InfraError
from swe_residual.results import iter_records
from swe_residual.run.attempt import Case
from swe_residual.run.verifier import Verifier
from swe_residual.states import load_states
from swe_residual.tasks import load_task, load_tasks

from .drivers import records, run_suite, world
from .taskfactory import F2P, P2P, docker_task, partial_state_patch, run_one, state_entry, write_states

try:
    from docker_helpers import bookworm_image, docker_client  # noqa: F401  (fixtures)
except ImportError:  # tests/ is a package
    from tests.docker_helpers import bookworm_image, docker_client  # noqa: F401  (fixtures)

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parent.parent
DEEPSWE = ROOT / "tests" / "fixtures" / "deepswe"
DS_TASK = "wordstats-top-words"
RUN_PREFIX = f"swe-test-{os.getpid()}"


def ours(client, run: str | None = None) -> list[dict]:
    """Labelled containers of this test session (run ids start with RUN_PREFIX) or of this process."""
    found = client.api.containers(all=True, filters={"label": LABEL_RUN})
    return [
        c
        for c in found
        if (
            c["Labels"].get(LABEL_RUN) == run
            if run
            else c["Labels"].get(LABEL_RUN, "").startswith(RUN_PREFIX)
            or c["Labels"].get(LABEL_PID) == str(os.getpid())
        )
    ]


@pytest.fixture(scope="module")
def no_leftovers(docker_client, bookworm_image):
    """Asserted after the module: no labelled container of this session exists any more."""
    yield docker_client
    left = ours(docker_client)
    assert not left, f"labelled containers left behind: {[(c['Id'][:12], c['Labels']) for c in left]}"


@pytest.fixture(scope="module")
def backend(no_leftovers, tmp_path_factory):
    b = DockerBackend(run_id=f"{RUN_PREFIX}-module", work_root=tmp_path_factory.mktemp("docker-work"))
    yield b
    b.close()


@pytest.fixture(scope="module")
def calc(tmp_path_factory):
    root = tmp_path_factory.mktemp("calc")
    task_dir = docker_task(root)
    patch = partial_state_patch(task_dir)
    states_path = write_states(root, [state_entry(root, task_dir, patch)])
    tasks = load_tasks(root / "tasks", "demo")
    return root, tasks["calc"], load_states(states_path, {"demo": tasks})[0], patch


@pytest.fixture(scope="module")
def deepswe():
    tasks = load_tasks(DEEPSWE, "deepswe")
    states = load_states(DEEPSWE / "states.yaml", {"deepswe": tasks})
    return tasks[DS_TASK], states[0]


def sh(env, command: str, timeout: float = 30) -> str:
    res = env.execute(command, timeout=timeout)
    assert res.exit_code == 0, res
    return res.output


# --------------------------------------------------------------------------- states and isolation


def test_residual_container_has_clean_history_and_uncommitted_patch(backend, calc):
    root, task, state, patch = calc
    expected_base = repo.init_base_repo(task.repository_dir, root / "base-check")
    with backend.materialize(task, None) as clean, backend.materialize(task, state) as res:
        log = "git log --format='%H %an %ad %s'"
        assert sh(res, log) == sh(clean, log)
        assert clean.base_commit == res.base_commit == expected_base == sh(res, "git rev-parse HEAD").strip()
        assert sh(clean, "git status --porcelain") == ""
        assert sh(res, "git status --porcelain").splitlines() == [" M calc.py", "?? NOTES.md", "?? logo.bin"]
        assert "+def div(a, b):" in sh(res, "git diff")
        # the whole working tree differs from the base by exactly the state's patch (binary file included)
        assert res.touched and clean.touched  # computed by git in the container, not the known start
        assert (final_state(res).patch, final_state(res).problem) == (patch, None)
        assert final_state(clean).patch == b""
        assert sh(res, "cat /run/task/instruction.md") == task.instruction
    # the residual image is built once and reused; it runs like the clean image and names no run
    assert backend.state_image(task, state).id == backend.state_image(task, state).id
    clean_cfg = backend.engine.api.inspect_image(backend.images.clean(task).id)["Config"]
    state_cfg = backend.engine.api.inspect_image(backend.state_image(task, state).id)["Config"]
    assert (state_cfg["Entrypoint"] or None, state_cfg["Cmd"]) == (
        clean_cfg["Entrypoint"] or None,
        clean_cfg["Cmd"],
    )
    assert not state_cfg["Labels"].get(LABEL_RUN) and not state_cfg["Labels"].get(LABEL_PID)


def test_agent_container_has_no_hidden_tests_no_network_and_its_limits(
    backend, calc, docker_client, tmp_path
):
    _, task, state, _ = calc
    search = (
        "find / \\( -path /proc -o -path /sys -o -path /dev \\) -prune -o \\( -name test_new.py "
        "-o -name solution.patch -o -name solve.sh -o -name test.sh -o -name config.json -o -name calc.py \\) "
        "-print 2>/dev/null; grep -rlsI -e test_div_by_zero -e ZeroDivisionError / --exclude-dir=proc "
        "--exclude-dir=sys --exclude-dir=dev --exclude-dir=usr 2>/dev/null; echo searched"
    )
    with backend.materialize(task, state) as env:
        found = [line for line in sh(env, search, 120).splitlines() if line.strip()]
        assert found == ["/app/calc.py", "/run/task/instruction.md", "searched"], found
        net = env.execute(
            "python3 -c \"import socket; socket.create_connection(('8.8.8.8', 53), timeout=2)\"", timeout=20
        )
        assert net.exit_code != 0
        host = docker_client.api.inspect_container(env.container_id)["HostConfig"]
        assert (host["NetworkMode"], host["NanoCpus"], host["Memory"]) == ("none", 10**9, 512 * 2**20)
        labels = docker_client.api.inspect_container(env.container_id)["Config"]["Labels"]
        assert labels[LABEL_RUN] == backend.engine.run_id and labels[LABEL_PID] == str(os.getpid())
        # verification happens elsewhere: the tests never enter this container, even afterwards
        env.stop()
        Verifier(backend, task, tmp_path).once(env)
        again = [line for line in sh(env, search, 120).splitlines() if line.strip()]
        assert again == found


def test_commands_leave_no_process_behind_and_time_out(backend, calc):
    _, task, _, _ = calc
    with backend.materialize(task, None) as env:
        res = env.execute("(sleep 30; touch /app/survived) & sleep 0.2; echo started", timeout=10)
        assert res.exit_code == 0 and res.output == "started\n" and res.duration_s < 5
        timed = env.execute("echo before; sleep 30", timeout=1)
        assert (
            timed.timed_out
            and timed.exit_code is None
            and timed.duration_s < 5
            and timed.output == "before\n"
        )
        procs = sh(
            env, "for p in /proc/[0-9]*; do printf '%s ' ${p#/proc/}; tr '\\0' ' ' < $p/cmdline; echo; done"
        )
        assert "sleep 30" not in procs and "survived" not in procs, procs
        assert not env.execute("test -e /app/survived", timeout=5).exit_code == 0
        assert env.execute("exit 3", timeout=5).exit_code == 3
        env.stop()
        assert env.read_file("/app/calc.py") == (task.repository_dir / "calc.py").read_bytes()
        assert env.read_file("/app/nope") is None


def test_a_copy_stopped_at_its_limit_does_not_hold_the_container(backend, calc, tmp_path):
    """A copy out that stops at its limit closes the engine's stream at once: while the stream
    stays open the engine keeps its lock on the container, and removing it waits - forever when
    the copy's exception (which holds the stream) is kept, as a re-grade abandoned beside a
    failing grade keeps it."""
    import threading

    from swe_residual.errors import HarnessError

    _, task, _, _ = calc
    env = backend.materialize(task, None)
    try:
        sh(env, "mkdir -p /tmp/out && head -c 64M /dev/urandom > /tmp/out/big")
        with pytest.raises(HarnessError, match="more than 1 MiB") as kept:  # the exception stays alive
            env.copy_out("/tmp/out", tmp_path / "out", limit=1 << 20)
        removed = threading.Event()
        remover = threading.Thread(
            target=lambda: (backend.engine.remove(env.container_id), removed.set()), daemon=True
        )
        remover.start()
        assert removed.wait(30), "removing the container waited for the copy's open stream"
        assert kept.value is not None
    finally:
        env.close()


# --------------------------------------------------------------------------- shared-mode verification


def test_oracle_and_nop_outcomes_and_final_patches(backend, calc, tmp_path):
    _, task, state, patch = calc
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    for agent, start, st, outcome in [
        ("oracle", "clean", None, 1),
        ("oracle", "residual", state, 1),
        ("nop", "residual", state, 0),
        ("nop", "clean", None, 0),
    ]:
        rec = run_one(Case(agent, task, start, st), AgentRegistry().get(agent), backend, run_dir)
        assert rec.outcome == outcome and rec.backend == "docker", rec
    records = list(iter_records(run_dir))
    nop_res = records[2]
    assert sorted(t for t, s in nop_res.tests.items() if s != "passed") == ["tests.test_new.test_div_by_zero"]
    assert set(nop_res.tests) == set(F2P + P2P)
    assert (run_dir / nop_res.artifacts["patch"]).read_bytes() == patch
    oracle_patch = (run_dir / records[0].artifacts["patch"]).read_bytes()
    assert b"+def div(a, b):" in oracle_patch and b"NOTES.md" not in oracle_patch
    assert (run_dir / records[1].artifacts["patch"]).read_bytes() == oracle_patch
    for r in records:
        assert (run_dir / r.artifacts["verifier_log"]).is_file()
        assert (run_dir / r.artifacts["patch"]).parent.joinpath("verifier", "junit.xml").is_file()


def _infra(backend, task, tmp_path) -> str:
    run_dir = tmp_path / "run"
    run_dir.mkdir(exist_ok=True)
    with pytest.raises(InfraError) as err:
        run_one(Case("nop", task, "clean"), AgentRegistry().get("nop"), backend, run_dir)
    (rec,) = list(iter_records(run_dir))
    assert rec.outcome is None and rec.verdict == "infra_error" and rec.error == str(err.value)
    return str(err.value)


def test_state_patch_that_does_not_apply_is_an_infra_error(backend, calc, tmp_path):
    root, task, _, _ = calc
    bad = state_entry(
        tmp_path,
        task.path,
        b"diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n"
        b"@@ -1,2 +1,2 @@\n-def nothing_like_this():\n+def x():\n     return a + b\n",
        state_id="bad",
    )
    state = load_states(write_states(tmp_path, [bad]), {"demo": {"calc": task}})[0]
    with pytest.raises(InfraError, match=r"^state bad: patch .* does not apply at the base commit: "):
        backend.materialize(task, state)


def test_hanging_verifier_and_missing_report_are_infra_errors(backend, tmp_path):
    hang = load_task(
        docker_task(tmp_path / "a", test_sh="#!/bin/bash\nsleep 600\n", verifier_timeout=1.5), "demo"
    )
    # it hangs on the reference solution's state too: the verifier is broken, not the agent's work
    msg = _infra(backend, hang, tmp_path / "a")
    assert msg.startswith(
        "verifier timed out after 1.5s running tests/test.sh (twice; the verifier fails on the "
        "reference solution's state too"
    ), msg
    silent = load_task(docker_task(tmp_path / "b", test_sh="#!/bin/bash\necho no report\n"), "demo")
    assert "wrote no test report" in _infra(backend, silent, tmp_path / "b")


# --------------------------------------------------------------------------- DeepSWE-shaped fixture


class ScriptedAgent(Agent):
    """Runs fixed commands ({solution} = the reference solution, which it asks for) and submits."""

    def __init__(self, name: str, commands: list[str]):
        super().__init__(name)
        self.commands = commands

    def run(self, ctx: AgentContext) -> AgentResult:
        ctx.env.copy_in(ctx.task.solution_dir, "/solution")
        for command in self.commands:
            res = ctx.shell(command.format(solution="/solution"))
            assert res.exit_code == 0, res
        return AgentResult(declared_complete=True, termination="submitted", steps=len(ctx.trajectory.steps))


FIX = "git reset -q --hard && git clean -qfd && git apply {solution}/solution.patch"
COMMIT = "git checkout -q -b fix && git add -A && git commit -q -m 'Add top_words'"


def test_deepswe_fixture_is_loaded_as_published(deepswe):
    task, state = deepswe
    cfg = task.config
    assert cfg.schema_version == "1.3" and cfg.verifier.environment_mode == "separate"
    (hook,) = cfg.verifier.collect  # the current published form: one inline command, no script
    assert hook.command.startswith("cd /app && ") and hook.command.endswith(
        f"git diff --binary {cfg.metadata.base_commit_hash} HEAD > /logs/artifacts/model.patch"
    )
    # the published solve.sh: the fixed /solution path, no `set -e`, a trailing `|| true`
    solve = (task.solution_dir / "solve.sh").read_text()
    assert "/solution/solution.patch" in solve and "set -e" not in solve
    assert solve.rstrip().endswith("|| true")
    assert (
        cfg.verifier.model_extra["environment"]["cpus"] == 1
        and cfg.agent.model_extra["network_mode"] == "no-network"
    )
    assert task.grading.base_commit == cfg.metadata.base_commit_hash
    assert len(task.grading.f2p_node_ids) == 6 and len(task.grading.p2p_node_ids) == 3
    for f in ("Dockerfile", "test.sh", "test.patch", "grader.py", "config.json"):
        assert (task.tests_dir / f).is_file()
    # the fixed-identity commit of the shipped files is the base commit the task names
    work = Path(os.environ.get("TMPDIR", "/tmp")) / f"ds-base-{uuid.uuid4().hex[:8]}"
    try:
        assert repo.init_base_repo(task.environment_dir / "repo", work) == cfg.metadata.base_commit_hash
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_deepswe_fixture_outcomes(backend, deepswe, tmp_path, docker_client):
    task, state = deepswe
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    f2p, p2p = task.grading.f2p_node_ids, task.grading.p2p_node_ids
    registry = AgentRegistry()
    agents = {
        "oracle": registry.get("oracle"),
        "nop": registry.get("nop"),
        "fix-no-commit": ScriptedAgent("fix-no-commit", [FIX]),
        "fix-and-commit": ScriptedAgent("fix-and-commit", [FIX, COMMIT]),
    }
    cases = [
        ("oracle", None, 1),
        ("nop", None, 0),
        ("oracle", state, 1),
        ("nop", state, 0),
        ("fix-no-commit", state, 0),
        ("fix-and-commit", state, 1),
    ]
    recs = {}
    for name, st, outcome in cases:
        rec = run_one(Case(name, task, "residual" if st else "clean", st), agents[name], backend, run_dir)
        assert rec.outcome == outcome, (name, st, rec)
        recs[(name, st is not None)] = rec
    art = lambda rec, rel: run_dir / Path(rec.artifacts["patch"]).parent / rel
    # the clean base passes every p2p test and fails every f2p test
    failing = lambda rec: sorted(t for t, s in rec.tests.items() if s != "passed")
    assert failing(recs[("nop", False)]) == sorted(f2p)
    # the residual state is uncommitted: the published hook collects nothing, the base is graded
    nop_res = recs[("nop", True)]
    assert art(nop_res, "artifacts/model.patch").read_bytes() == b""
    assert art(nop_res, "final.patch").read_bytes() == state.patch
    assert json.loads(art(nop_res, "verifier/reward.json").read_text())["reward"] == 0
    # fixing without committing: the work is there (final.patch) but not submitted (model.patch)
    no_commit = recs[("fix-no-commit", True)]
    assert art(no_commit, "artifacts/model.patch").read_bytes() == b""
    assert b"+def top_words" in art(no_commit, "final.patch").read_bytes()
    committed = recs[("fix-and-commit", True)]
    assert b"+def top_words" in art(committed, "artifacts/model.patch").read_bytes()
    assert json.loads(art(committed, "verifier/reward.json").read_text()) == {
        "reward": 1,
        "f2p_total": 6,
        "f2p_passed": 6,
        "p2p_total": 3,
        "p2p_passed": 3,
        "f2p": 1.0,
        "p2p": 1.0,
        "partial": 1.0,
    }
    ctrf = json.loads(art(committed, "verifier/ctrf.json").read_text())
    assert {t["name"] for t in ctrf["results"]["tests"]} == set(f2p + p2p)
    # grading the state's own content (the validate trap): it fails exactly its recorded tests
    with backend.materialize(task, state) as env:
        hidden = env.execute(
            "ls /tests; find / -name grader.py -not -path '/proc/*' 2>/dev/null; "
            "grep -rls test_top_words / --exclude-dir=proc --exclude-dir=sys --exclude-dir=usr "
            "2>/dev/null; echo searched",
            timeout=120,
        )
        assert hidden.output.splitlines()[-1] == "searched" and len(hidden.output.splitlines()) == 2, (
            hidden.output
        )
        env.stop()
        (tmp_path / "uncommitted").mkdir()
        verdict = Verifier(backend, task, tmp_path / "uncommitted", grade_uncommitted=True).once(env).verdict
    assert verdict.outcome == 0 and verdict.failing == state.initial_verdict.failing_tests
    assert (tmp_path / "uncommitted" / "artifacts" / "model.patch").read_bytes() == state.patch
    # the clean image also answers to the task's public image name (tests/Dockerfile's FROM)
    public = docker_client.api.inspect_image(task.config.environment.docker_image)["Id"]
    assert public == backend.images.clean(task).id


def test_deepswe_verifier_crash_is_an_infra_error(backend, deepswe, tmp_path):
    task, _ = deepswe
    broken = tmp_path / DS_TASK
    shutil.copytree(task.path, broken)
    (broken / "tests" / "test.patch").write_text(
        "diff --git a/nowhere.py b/nowhere.py\n--- a/nowhere.py\n+++ b/nowhere.py\n@@ -1 +1 @@\n-x\n+y\n"
    )
    msg = _infra(backend, load_task(broken, "deepswe"), tmp_path)
    assert "reported reward -1" in msg


# --------------------------------------------------------------------------- sessions and leftovers


def test_sigkilled_worker_leftovers_are_swept_by_the_next_session(backend, calc, docker_client):
    _, task, _, _ = calc
    backend.images.clean(task)
    run = f"{RUN_PREFIX}-killed"
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT)!r})
        from pathlib import Path
        from swe_residual.backends.docker.backend import DockerBackend
        from swe_residual.tasks import load_task
        b = DockerBackend(run_id={run!r}, sweep=False)
        env = b.materialize(load_task(Path({str(task.path)!r}), "demo"), None)
        print(env.container_id, flush=True)
        env.execute("sleep 300", timeout=600)   # killed mid-command
    """)
    proc = subprocess.Popen(
        [sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        cid = proc.stdout.readline().strip()
        assert cid, proc.stderr.read() if proc.poll() is not None else "no container id"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    # the killed worker's leftover and its host-side scratch (unless a session starting on the other
    # xdist worker right now has swept them already: that is the behaviour under test too)
    left = [c["Id"] for c in ours(docker_client, run)]
    scratch = list((backend.engine.cache_dir / "work").glob(f"*--{proc.pid}--*"))
    assert left in ([cid], []) and len(scratch) <= 1
    sweeper = DockerBackend(run_id=f"{RUN_PREFIX}-sweeper")
    try:
        assert not left or cid in sweeper.engine.swept
        assert ours(docker_client, run) == [] and not any(s.exists() for s in scratch)
        assert backend.engine.run_id not in {
            c["Labels"][LABEL_RUN]
            for c in docker_client.api.containers(all=True, filters={"label": LABEL_RUN})
            if c["Id"] in sweeper.engine.swept
        }  # live runs are kept
    finally:
        sweeper.close()


def test_concurrent_processes_build_an_image_once(backend, tmp_path, docker_client):
    task_dir = docker_task(tmp_path)
    (task_dir / "environment" / "repo" / "UNIQUE").write_text(uuid.uuid4().hex)  # a context never built
    script = textwrap.dedent(f"""
        import json, sys
        sys.path.insert(0, {str(ROOT)!r})
        from pathlib import Path
        from swe_residual.backends.docker.backend import DockerBackend
        from swe_residual.tasks import load_task
        b = DockerBackend(run_id="{RUN_PREFIX}-build-" + sys.argv[1], sweep=False)
        img = b.images.clean(load_task(Path({str(task_dir)!r}), "demo"))
        print(json.dumps({{"id": img.id, "built": b.images.built}}))
        b.close()
    """)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(i)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    outs = [p.communicate(timeout=600) for p in procs]
    results = [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]
    try:
        assert results[0]["id"] == results[1]["id"]
        assert sorted(len(r["built"]) for r in results) == [0, 1]
    finally:
        docker_client.api.remove_image(results[0]["id"], force=True)


def _suite(backend_name: str, run_dir: Path, task_id: str, *extra: str) -> dict[str, dict]:
    proc = run_suite(
        "-k", task_id, "-q", *extra, backend=backend_name, agents=["oracle", "nop"], run_dir=run_dir
    )
    assert proc.returncode in (0, 1), proc.stdout[-3000:] + proc.stderr[-3000:]
    tail = proc.stdout.split("short test summary")[-1]
    assert " error" not in tail, proc.stdout[-3000:]
    out = {}
    for r in records(run_dir):
        out[r["case_id"]] = {
            "verdict": r["verdict"],
            "outcome": r["outcome"],
            "tests": r["tests"],
            "patch": (run_dir / r["artifacts"]["patch"]).read_bytes(),
        }
    return out


def test_demo_cases_have_identical_outcomes_on_local_and_docker(no_leftovers, tmp_path):
    states = yaml.safe_load((ROOT / "states.yaml").read_text())["states"]
    demo_tasks = sorted({s["task"] for s in states if s["track"] == "demo"})
    assert demo_tasks, "states.yaml lists no demo states"
    task_id = demo_tasks[0]
    local = _suite("local", tmp_path / f"{RUN_PREFIX}-local", task_id)
    docker_run = tmp_path / f"{RUN_PREFIX}-docker"
    docker = _suite("docker", docker_run, task_id, "-n", "2")
    assert len(local) >= 4 and sorted(local) == sorted(docker)
    for case_id in local:
        assert local[case_id] == docker[case_id], case_id
    assert ours(no_leftovers, docker_run.name) == []


def test_failed_image_build_fails_only_that_tasks_cases_with_records(no_leftovers, tmp_path):
    (_, broken) = world(tmp_path, "calc", "broken", backend="docker").tasks
    with open(broken / "environment" / "Dockerfile", "a") as fh:
        fh.write("RUN echo this build fails && exit 3\n")
    run_dir = tmp_path / f"{RUN_PREFIX}-broken-build"
    proc = run_suite(
        "--infra-retries", "1", world=tmp_path, run_dir=run_dir, backend="docker", agents=["nop"], workers=2
    )
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "2 failed" in proc.stdout and "2 error" in proc.stdout  # the good task's cases still ran
    recs = records(run_dir)
    bad = [r for r in recs if r["task"] == "broken"]
    assert sorted((r["case_id"], r["attempt"]) for r in bad) == [
        ("nop-broken-clean", 1),
        ("nop-broken-clean", 2),
        ("nop-broken-residual-broken--partial", 1),
        ("nop-broken-residual-broken--partial", 2),
    ]
    for r in bad:
        assert (r["rule"], r["verdict"], r["termination"]) == ("infra_harness", "infra_error", "infra")
        assert "building the environment of task broken" in r["error"] and "failed" in r["error"]
    assert {(r["case_id"], r["verdict"]) for r in recs if r["task"] == "calc"} == {
        ("nop-calc-clean", "fail"),
        ("nop-calc-residual-calc--partial", "fail"),
    }
    assert ours(no_leftovers, run_dir.name) == []


def test_verifier_container_that_dies_is_infra_and_leaves_nothing(no_leftovers, tmp_path, backend):
    # the verifier stops its own container (PID 1 exits): on every state, the reference's too
    task = load_task(docker_task(tmp_path, test_sh="#!/bin/bash\nkill -TERM 1\nsleep 5\n"), "demo")
    msg = _infra(backend, task, tmp_path)
    (rec,) = list(iter_records(tmp_path / "run"))
    assert rec.rule == "infra_verifier" and "the verifier fails on the reference solution's state too" in msg

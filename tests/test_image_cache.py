"""The harness's image caches hold only verified facts, real Docker throughout: a probe that fails
caches nothing and the next case probes again; a cached entry a case contradicts is probed again
once and the case goes on; `swe-residual images list|prune` shows and removes what is kept; a
task's docker_image that no registry serves falls back to its Dockerfile within seconds."""

from __future__ import annotations

import functools
import json
import sys
import time
import uuid
from pathlib import Path

import pytest

from swe_residual.agents import AgentRegistry
from swe_residual.backends.docker.backend import DockerBackend
from swe_residual.backends.docker.images import PROBE_TIMEOUT_S
from swe_residual.errors import HarnessError, InputError
from swe_residual.run.attempt import Case
from swe_residual.states import load_states
from swe_residual.tasks import load_tasks

from .drivers import cli, world
from .taskfactory import CALC_DOCKERFILE, CALC_SOLVED, run_one

try:
    from docker_helpers import bookworm_image, docker_client  # noqa: F401  (fixtures)
except ImportError:  # tests/ is a package
    from tests.docker_helpers import bookworm_image, docker_client  # noqa: F401  (fixtures)

pytestmark = pytest.mark.docker
# the calc image plus a file it ships untracked (as DeepSWE's older images ship pre_artifacts.sh)
SHIPPING = CALC_DOCKERFILE + "RUN echo shipped > /app/shipped.txt\n"
# solves the task and leaves the shipped file alone (the oracle's `git clean` would remove it)
SOLVER = "command:cat > calc.py <<'EOF'\n" + CALC_SOLVED + "EOF\n"


def _task(root: Path, dockerfile: str = CALC_DOCKERFILE, docker_image: str | None = None):
    """A calc task of its own id (its own image tags), with one residual state."""
    task_id = f"cache-{uuid.uuid4().hex[:8]}"
    MADE.append(task_id)
    w = world(root, task_id, backend="docker")
    task_dir = w.tasks[0]
    (task_dir / "environment" / "Dockerfile").write_text(dockerfile)
    if docker_image:
        toml = (
            (task_dir / "task.toml")
            .read_text()
            .replace("[environment]\n", f'[environment]\ndocker_image = "{docker_image}"\n')
        )
        (task_dir / "task.toml").write_text(toml)
    tasks = load_tasks(root / "tasks", "demo")
    return tasks[task_id], load_states(w.states, {"demo": tasks})[0]


MADE: list[str] = []  # task ids the current test made (each has its own image tags)


@pytest.fixture(autouse=True)
def _drop_images(docker_client):
    """Untag, after each test, every image of the tasks it made."""
    yield
    for img in docker_client.api.images(filters={"label": "swe-residual.image.kind"}):
        if (img.get("Labels") or {}).get("swe-residual.image.task") in MADE:
            for ref in img.get("RepoTags") or [img["Id"]]:
                try:
                    docker_client.api.remove_image(ref if ref != "<none>:<none>" else img["Id"], force=True)
                except Exception:  # noqa: BLE001 - in use by another test's container, or gone already
                    pass
    MADE.clear()


def _backend(tmp_path: Path, cache: Path, name: str) -> DockerBackend:
    return DockerBackend(cache_dir=cache, work_root=tmp_path / f"work-{name}")


_cli = functools.partial(cli, "images")  # `swe-residual images ARGS`


def test_a_probe_that_times_out_caches_nothing_and_the_next_case_probes_again(tmp_path, bookworm_image):
    task, _ = _task(tmp_path)
    cache = tmp_path / "cache"
    backend = _backend(tmp_path, cache, "a")
    try:
        # a probe deadline shorter than any probe (create + start + exec of git takes ~0.1 s and more)
        backend.images.probe_timeout_s = 0.001
        t0 = time.monotonic()
        with pytest.raises(HarnessError, match="no answer within 0.001s; nothing cached"):
            backend.prepare(task, [])  # builds the image, then its probe times out
        failed_s = time.monotonic() - t0
        assert not (cache / "meta").exists() or list((cache / "meta").iterdir()) == []
        backend.images.probe_timeout_s = PROBE_TIMEOUT_S
        t0 = time.monotonic()
        info = backend.images.clean(task)  # the image is there: this is the probe alone
        probe_s = time.monotonic() - t0
        (meta,) = list((cache / "meta").iterdir())
        facts = json.loads(meta.read_text())
        assert len(facts["base_commit"]) == 40 and facts["base_commit"] == info.base_commit
        run_dir = tmp_path / "run"
        rec = run_one(Case("oracle", task, "clean"), AgentRegistry().get("oracle"), backend, run_dir)
        assert (rec.rule, rec.outcome) == ("verdict", 1), rec  # the next case ran to a real verdict
        print(
            f"\nprobe: failed after {failed_s:.2f} s (build included), real probe {probe_s:.2f} s",
            file=sys.stderr,
        )
    finally:
        backend.close()


def test_cached_facts_a_case_contradicts_are_probed_again_once(tmp_path, bookworm_image, capfd):
    task, state = _task(tmp_path, SHIPPING)
    cache = tmp_path / "cache"
    first = _backend(tmp_path, cache, "first")
    try:
        info = first.images.clean(task)
        path = first.images.meta_path(info.id)
        good = json.loads(path.read_text())
    finally:
        first.close()
    assert good["baseline"] and good["baseline"][0][1] == "shipped.txt"
    wrong_base = "f" * 40  # looks like a commit id; the image has no such commit
    for poisoned, case, outcome in (
        ({**good, "base_commit": wrong_base}, Case(SOLVER, task, "clean"), 1),
        ({**good, "baseline": []}, Case(SOLVER, task, "clean"), 1),
        ({**good, "base_commit": wrong_base}, Case("nop", task, "residual", state), 0),
    ):
        path.write_text(json.dumps(poisoned))
        backend = _backend(tmp_path, cache, uuid.uuid4().hex[:6])
        try:
            assert backend.images.clean(task).base_commit == poisoned["base_commit"]  # believed at first
            run_dir = tmp_path / f"run-{uuid.uuid4().hex[:6]}"
            rec = run_one(case, AgentRegistry().get(case.agent), backend, run_dir)
            # the first fresh instance showed other facts: probed again, the case went on to its verdict
            # (without: the final diff cannot read the base commit; the shipped file is in the final
            # patch, which then does not apply to a fresh instance; the state's patch "moves HEAD")
            assert (rec.rule, rec.outcome) == ("verdict", outcome), rec
            assert json.loads(path.read_text()) == good, "the entry is rewritten from the new probe"
            assert backend.images.clean(task).base_commit == good["base_commit"]
            assert b"shipped.txt" not in (run_dir / rec.artifacts["patch"]).read_bytes()
            assert "did not hold" in capfd.readouterr().err
            # once per process: the facts now hold, a second contradiction probes nothing
            t0 = time.monotonic()
            assert backend.images.reprobe(task, "test") is False
            assert time.monotonic() - t0 < 0.1
        finally:
            backend.close()


def test_a_contradiction_the_probe_confirms_stays_the_agents_failure(tmp_path, bookworm_image):
    task, _ = _task(tmp_path)
    cache = tmp_path / "cache"
    backend = _backend(tmp_path, cache, "a")
    try:
        backend.images.clean(task)
        facts_before = json.loads(backend.images.meta_path(backend.images.clean(task).id).read_text())
        # the agent destroys the objects of its repository: the base commit cannot be read any more
        agent = AgentRegistry().get("command:rm -rf .git/objects/?? && echo '# x' >> calc.py")
        rec = run_one(Case(agent.name, task, "clean"), agent, backend, tmp_path / "run")
        assert (rec.rule, rec.outcome) == ("verifier_agent_caused", 0), rec  # as before: the agent's
        assert "is not readable" in rec.verdict_note
        assert json.loads(backend.images.meta_path(backend.images.clean(task).id).read_text()) == facts_before
    finally:
        backend.close()


def test_images_list_and_prune(tmp_path, bookworm_image, docker_client):
    task, _ = _task(tmp_path)
    cache = tmp_path / "cache"
    backend = _backend(tmp_path, cache, "a")
    try:
        info = backend.images.clean(task)
    finally:
        backend.close()
    run = tmp_path / "run"
    (run / "reference").mkdir(parents=True)
    (run / "reference" / f"demo--{task.id}.json").write_text(json.dumps({"detail": "the verifier works"}))
    # what older harness versions and a transient failure left: no probe version, not a probe's facts
    hexid = info.id.split(":")[-1]
    (cache / "meta" / f"{hexid}.json").write_text(json.dumps({"base_commit": "", "baseline": []}))
    (cache / "meta" / f"{'0' * 64}.{'a' * 12}.json").write_text("{not json")
    scope = ["--cache-dir", str(cache), "--task", task.id, "--run-dir", str(run)]

    def listing() -> dict[str, list[dict]]:
        proc = _cli("list", *scope, "--format", "json")
        assert proc.returncode == 0, proc.stderr
        by_kind: dict[str, list[dict]] = {}
        for e in json.loads(proc.stdout)["entries"]:
            by_kind.setdefault(e["kind"], []).append(e)
        return by_kind

    t0 = time.monotonic()
    found = listing()
    list_s = time.monotonic() - t0
    meta = {Path(e["path"]).name: e for e in found["image-meta"]}
    assert meta[f"{hexid}.json"]["state"] == "outdated"  # an old format: never read again
    current = [e for e in found["image-meta"] if e["state"] == "ok"]
    assert (
        len(current) == 1
        and task.id in current[0]["describes"]
        and info.base_commit[:12] in current[0]["detail"]
    )
    (image,) = found["image"]
    assert image["path"] == info.id and info.ref in image["detail"] and image["state"] == "ok"
    assert [e["state"] for e in found["build-log"]] == ["ok"]
    assert [e["state"] for e in found["reference"]] == ["ok"]
    text = _cli("list", *scope)
    assert text.returncode == 0 and f"cache: {cache}" in text.stdout and "outdated" in text.stdout

    # the image goes: what describes it is stale, and prune removes exactly that
    docker_client.images.remove(info.ref)
    found = listing()
    assert "image" not in found and [e["state"] for e in found["build-log"]] == ["gone"]
    assert sorted(e["state"] for e in found["image-meta"]) == ["gone", "outdated", "unreadable"]
    dry = _cli("prune", *scope, "--dry-run")
    assert dry.returncode == 0 and "would remove 4 of 5 entries" in dry.stdout, dry.stdout
    assert len(list((cache / "meta").iterdir())) == 3  # a dry run removes nothing
    done = _cli("prune", *scope)
    assert done.returncode == 0 and "removed 4 of 5 entries" in done.stdout, done.stdout + done.stderr
    found = listing()
    assert set(found) == {"reference"}  # kept: it names no image

    # --all: the harness's images too, and the run's reference checks; an image in use stays (exit 1)
    backend = _backend(tmp_path, cache, "b")
    try:
        info = backend.images.clean(task)
        cid = docker_client.api.create_container(info.id, command=["sleep", "60"])["Id"]
        try:
            busy = _cli("prune", *scope, "--all")
            assert busy.returncode == 1 and "could not be removed" in busy.stdout, busy.stdout + busy.stderr
            assert "not removed: image" in busy.stderr
        finally:
            docker_client.api.remove_container(cid, force=True)
        done = _cli("prune", *scope, "--all")
        assert done.returncode == 0, done.stdout + done.stderr
        assert backend.engine.image_attrs(info.ref) is None and listing() == {}
    finally:
        backend.close()
    # no engine: list says so and still lists; prune without --all is a usage error (exit 2)
    nowhere = {"DOCKER_HOST": f"unix://{tmp_path}/no-such.sock"}
    (cache / "meta").mkdir(exist_ok=True)
    (cache / "meta" / f"{hexid}.{'b' * 12}.json").write_text(json.dumps({"base_commit": "", "baseline": []}))
    offline = _cli("list", "--cache-dir", str(cache), env=nowhere)
    assert offline.returncode == 0 and "no Docker engine answers" in offline.stderr
    refused = _cli("prune", "--cache-dir", str(cache), env=nowhere)
    assert refused.returncode == 2 and "no Docker engine answers" in refused.stderr, refused.stderr
    print(f"\nimages list: {list_s:.2f} s", file=sys.stderr)


@pytest.mark.parametrize("name", ["swe-residual-test/never-published", "127.0.0.1:9/swe-residual-test/none"])
def test_a_docker_image_no_registry_serves_falls_back_to_the_dockerfile(
    tmp_path, bookworm_image, capfd, name
):
    image = f"{name}:{uuid.uuid4().hex[:8]}"
    task, _ = _task(tmp_path, docker_image=image)
    backend = _backend(tmp_path, tmp_path / "cache", "a")
    try:
        t0 = time.monotonic()
        attrs, why = backend.images._pull(image, task)
        pull_s = time.monotonic() - t0
        assert attrs is None and why
        info = backend.images.clean(task)  # the pull fails again, and the build runs
        assert info.ref.startswith("swe-residual/clean-") and len(info.base_commit) == 40
        err = capfd.readouterr().err
        assert f"pull {image}: not pulled (" in err and "building environment/Dockerfile instead" in err
        assert pull_s < 5, pull_s  # no registry here: the engine answers at once
        assert backend.engine.image_attrs(image) is not None  # the public name now tags our build
        print(f"\npull of {image}: fell back after {pull_s:.2f} s", file=sys.stderr)
    finally:
        backend.close()
    # no Dockerfile to fall back to: a usage error naming the file and why the pull failed
    (task.environment_dir / "Dockerfile").unlink()
    other = f"{name}:{uuid.uuid4().hex[:8]}"
    toml = task.path / "task.toml"
    toml.write_text(toml.read_text().replace(image, other))
    bare = load_tasks(task.path.parent, "demo")[task.id]
    backend = _backend(tmp_path, tmp_path / "cache", "b")
    try:
        with pytest.raises(
            InputError, match=r"neither environment/Dockerfile nor a local image .*pulling it: "
        ):
            backend.images.clean(bare)
    finally:
        backend.close()

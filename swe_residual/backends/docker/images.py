"""Task images: built once per engine and reused across sessions, tags derived from content.

* clean image - `[environment] docker_image` when that image exists locally and was not built by
  us, else pulled when a registry answers (progress per layer on stderr, bounded in time), else
  built from `environment/Dockerfile`. Missing `FROM` base images are bootstrapped offline
  (swe_residual.backends.docker.bootstrap). Also tagged with the task's public image names, so a
  separate verifier's `tests/Dockerfile` builds unchanged.
* residual image - the clean image with the state applied uncommitted (swe_residual.backends.workspace.
  apply_state in a container, then `docker commit` keeping the clean image's entrypoint and cmd).
* verifier image - `tests/Dockerfile` built on the clean image (environment_mode = "separate").

An fcntl lock per tag makes concurrent processes (xdist workers) build each image once.

What a probe found in a clean image (base commit, shipped untracked files) is cached on disk by
image id, written only from a probe that succeeded and whose facts hold. Facts read from the cache
are confirmed in the first fresh instance of the image each process starts; a case that
contradicts them (another HEAD, another untracked list, a base commit git cannot read) has the
image probed again, once per process, and the entry rewritten from that probe.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from swe_residual.backends.docker import bootstrap as base_images
from swe_residual.backends.docker.engine import (
    CONTAINER_LABELS,
    ENGINE_ERRORS,
    IMG_KEY,
    IMG_KIND,
    IMG_RUN,
    IMG_TASK,
    Engine,
    client_for,
    one_line,
)
from swe_residual.backends.workspace import script
from swe_residual.errors import HarnessError, InputError
from swe_residual.states import LoadedState, sha256_file
from swe_residual.tasks import Task

# Images built FROM a bootstrapped base inherit its label; ours must not pass for a base image.
NOT_BOOTSTRAP = {base_images.BOOTSTRAP_LABEL: ""}


PROBE_TIMEOUT_S = 120.0  # the deadline of one probe of an image (TaskImages.probe_timeout_s)
PULL_TIMEOUT_ENV = "SWE_RESIDUAL_PULL_TIMEOUT_S"  # the deadline of one pull (default: build_timeout_sec)
PULL_STALL_S = 60.0  # a pull that reports nothing for this long is given up


def probe_version() -> str:
    """The probe script's hash: part of every image-meta cache key."""
    return hashlib.sha256(script("probe_image.sh").encode()).hexdigest()[:12]


@dataclass
class ImageFacts:
    """What the probe found in a clean image; shared (one object) by every image built on it, so a
    re-probe corrects them all, and read by environments when they use them."""

    base_commit: str = ""
    baseline: list[tuple[str, str]] = field(default_factory=list)  # (blob, path) shipped untracked
    confirmed: bool = False  # probed by this process, or seen to hold in a fresh instance


@dataclass
class ImageInfo:
    ref: str  # tag to use
    id: str
    facts: ImageFacts = field(default_factory=ImageFacts)
    kind: str = "clean"  # clean | residual | verifier | machine: which facts an instance shows

    @property
    def base_commit(self) -> str:
        return self.facts.base_commit

    @property
    def baseline(self) -> list[tuple[str, str]]:
        return self.facts.baseline

    @property
    def baseline_env(self) -> str:
        return "\n".join(f"{b} {p}" for b, p in self.facts.baseline)


def slug(text: str) -> str:
    s = re.sub(r"[^a-z0-9._-]+", "-", text.lower()).strip("-._")
    return (s or "task")[:60]


def context_hash(root: Path) -> str:
    """sha256 over every file of a build context: relative path, type, exec bit, content."""
    h = hashlib.sha256()
    root = Path(root)
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames.sort()
        rel_dir = os.path.relpath(dirpath, root)
        for name in sorted(filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]):
            path = os.path.join(dirpath, name)
            rel = os.path.normpath(os.path.join(rel_dir, name))
            st = os.lstat(path)
            if os.path.islink(path):
                h.update(f"L\0{rel}\0{os.readlink(path)}\0".encode())
            else:
                h.update(f"F\0{rel}\0{int(bool(st.st_mode & 0o111))}\0{st.st_size}\0".encode())
                with open(path, "rb") as fh:
                    for chunk in iter(lambda: fh.read(1 << 20), b""):
                        h.update(chunk)
        for d in dirnames:
            if not os.path.islink(os.path.join(dirpath, d)):
                h.update(f"D\0{os.path.normpath(os.path.join(rel_dir, d))}\0".encode())
    return h.hexdigest()


class TaskImages:
    """Clean, residual and verifier images of tasks on one engine (cached per process and on disk)."""

    def __init__(self, engine: Engine):
        self.engine = engine
        self._lock = threading.RLock()
        self._images: dict[str, ImageInfo] = {}
        self._key_locks: dict[str, threading.Lock] = {}
        self._reprobed: set[str] = set()  # clean image ids probed again after a contradiction
        self.built: list[str] = []  # tags this process built (others found them ready)
        self.pulled: list[str] = []  # images this process pulled
        self.probe_timeout_s = PROBE_TIMEOUT_S

    def _cached(self, key: str, make: Callable[[], ImageInfo]) -> ImageInfo:
        with self._lock:
            lock = self._key_locks.setdefault(key, threading.Lock())
        with lock:
            if key not in self._images:
                self._images[key] = make()
            return self._images[key]

    # -- clean ----------------------------------------------------------------------------------
    def clean(self, task: Task) -> ImageInfo:
        return self._cached(f"clean:{task.path}", lambda: self._clean(task))

    def public_names(self, task: Task) -> list[str]:
        """Names the task's other Dockerfiles expect its image under (docker_image, tests/Dockerfile FROM)."""
        names: list[str] = []
        if task.config.environment.docker_image:
            names.append(task.config.environment.docker_image)
        tests_df = task.tests_dir / "Dockerfile"
        if tests_df.is_file():
            froms = base_images.base_images_of([tests_df])
            if froms and "@" not in froms[0]:
                names.append(froms[0])
        return list(dict.fromkeys(names))

    def _clean(self, task: Task) -> ImageInfo:
        eng = self.engine
        public = task.config.environment.docker_image
        dockerfile = task.environment_dir / "Dockerfile"
        pull_failed = ""
        if public:
            attrs = eng.image_attrs(public)
            if attrs is None:
                attrs, pull_failed = self._pull(public, task)
            if attrs is not None:
                labels = (attrs.get("Config") or {}).get("Labels") or {}
                if labels.get(IMG_KIND) != "clean" or not dockerfile.is_file():
                    # the real prebuilt task image (not one we built and tagged): use it as it is
                    return self._with_meta(ImageInfo(ref=public, id=attrs["Id"]), task)
        if not dockerfile.is_file():
            why = f" (pulling it: {pull_failed})" if pull_failed else ""
            raise InputError(
                f"{task.path / 'task.toml'}: environment: neither environment/Dockerfile nor a local "
                f"image [environment] docker_image ({public or 'unset'}) exists{why}"
            )
        base_ids = self._base_images(dockerfile)
        digest = hashlib.sha256(
            ("clean-v2\0" + context_hash(task.environment_dir) + "\0" + "\0".join(base_ids)).encode()
        ).hexdigest()
        tag = f"swe-residual/clean-{slug(task.id)}:{digest[:16]}"
        with eng.file_lock(tag):
            attrs = eng.image_attrs(tag)
            if attrs is None:
                labels = {
                    IMG_KIND: "clean",
                    IMG_KEY: digest,
                    IMG_TASK: task.id,
                    IMG_RUN: eng.run_id,
                    **NOT_BOOTSTRAP,
                }
                image_id = self._build(
                    task.environment_dir,
                    tag,
                    labels,
                    task.config.environment.build_timeout_sec,
                    f"the environment of task {task.id}",
                )
            else:
                image_id = attrs["Id"]
            for name in self.public_names(task):
                existing = eng.image_attrs(name)
                ours = (
                    existing is not None
                    and ((existing.get("Config") or {}).get("Labels") or {}).get(IMG_KIND) == "clean"
                )
                if existing is None or (ours and existing["Id"] != image_id):
                    self._tag(image_id, name)
            return self._with_meta(ImageInfo(ref=tag, id=image_id), task)

    def meta_path(self, image_id: str) -> Path:
        """Where the probed facts of an image are cached: keyed by the image id (content-addressed)
        and by the probe script, so an entry cannot outlive the image or the probe it came from."""
        return self.engine.cache_dir / "meta" / f"{image_id.split(':')[-1]}.{probe_version()}.json"

    def _with_meta(self, info: ImageInfo, task: Task) -> ImageInfo:
        """Base commit and shipped untracked files of an image: probed once, cached on disk only
        when the probe succeeded and its facts hold (a repository task's base commit is a full
        commit id that HEAD resolves to); a cached entry that does not hold is probed again."""
        path = self.meta_path(info.id)
        meta = None
        if path.is_file():
            with contextlib.suppress(ValueError, OSError):
                meta = json.loads(path.read_text(encoding="utf-8"))
            if not (isinstance(meta, dict) and _meta_holds(meta, task)):
                meta = None
        confirmed = meta is None
        if meta is None:
            meta = self._probe_facts(info.id, task)
            self._store_meta(path, {**meta, "task": task.id, "image": info.ref})
        info.facts = ImageFacts(
            base_commit=meta.get("base_commit") or "",
            baseline=[tuple(x) for x in meta.get("baseline") or []],
            confirmed=confirmed,
        )
        task.check_base_commit(info.base_commit, "HEAD of /app in the task image")
        return info

    @staticmethod
    def _store_meta(path: Path, meta: dict) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(meta), encoding="utf-8")
        os.replace(tmp, path)

    def _probe_facts(self, image: str, task: Task) -> dict:
        """The probe's facts of an image, validated (HarnessError, nothing cached, when they do not hold)."""
        meta = parse_probe(self._probe(image, task))
        if not _meta_holds(meta, task):
            raise HarnessError(
                f"probing the image of task {task.id}: /app has no commit (git rev-parse "
                f"HEAD printed {meta['base_commit'][:80]!r}); nothing cached, the next case probes again"
            )
        return meta

    def _probe(self, image: str, task: Task) -> bytes:
        eng = self.engine
        timeout = self.probe_timeout_s
        cid = eng.create(
            image, case="probe", what=f"probing the image of task {task.id}", network_mode="none"
        )
        try:
            eng.start(cid, f"probing the image of task {task.id}")
            rc, out, host_timeout = eng.exec(
                cid, ["bash", "-c", script("probe_image.sh")], timeout=timeout, workdir="/", stdout_only=True
            )
            if host_timeout:
                raise HarnessError(
                    f"probing the image of task {task.id}: no answer within {timeout:g}s; "
                    "nothing cached, the next case probes again"
                )
            if rc != 0:
                raise HarnessError(
                    f"probing the image of task {task.id}: exit {rc}; nothing cached, the next "
                    "case probes again"
                )
            return out
        finally:
            eng.remove(cid)

    # -- cached facts a case contradicts -----------------------------------------------------------
    def confirm(self, task: Task, env) -> None:
        """In a fresh instance (started, nothing run in it yet) of an image whose facts came from the
        disk cache: do they hold there? HEAD for every image, the untracked files for a clean one.
        A contradiction has the clean image probed again (reprobe)."""
        facts = env.image.facts
        if facts.confirmed or env.image.kind not in ("clean", "residual"):
            return
        try:
            rc, out, host_timeout = self.engine.exec(
                env.container_id,
                ["bash", "-c", script("probe_image.sh")],
                timeout=self.probe_timeout_s,
                workdir="/",
                stdout_only=True,
            )
        except HarnessError:
            return  # no conclusion: the facts stay as they are, the next instance looks again
        if host_timeout or rc != 0:
            return
        seen = parse_probe(out)
        same = seen["base_commit"] == facts.base_commit
        if env.image.kind == "clean":
            same = same and sorted(map(tuple, seen["baseline"])) == sorted(facts.baseline)
        if same:
            facts.confirmed = True
        else:
            self.reprobe(
                task,
                f"a fresh instance of {env.image.ref} shows HEAD {seen['base_commit'][:12] or '-'} "
                f"and {len(seen['baseline'])} untracked files",
            )

    def reprobe(self, task: Task, why: str) -> bool:
        """A case contradicted the cached facts of the task's clean image: probe it again (once per
        process and image, not at all when this process saw them hold) and rewrite the entry from
        that probe; the facts of every image built on it change in place. True when they changed;
        False when they stand (the case's problem is its own)."""
        clean = self.clean(task)
        facts = clean.facts
        with self._lock:
            lock = self._key_locks.setdefault(f"reprobe:{clean.id}", threading.Lock())
        with lock:  # a second caller waits for the first's answer
            if facts.confirmed or clean.id in self._reprobed:
                return False
            self._reprobed.add(clean.id)
            meta = self._probe_facts(clean.id, task)
            new_baseline = [tuple(x) for x in meta["baseline"]]
            changed = meta["base_commit"] != facts.base_commit or sorted(new_baseline) != sorted(
                facts.baseline
            )
            if changed:
                print(
                    f"swe-residual: the cached facts of image {clean.ref} did not hold ({why}): probed again, "
                    f"cache entry rewritten",
                    file=sys.stderr,
                )
                task.check_base_commit(meta["base_commit"], "HEAD of /app in the task image")
                self._store_meta(self.meta_path(clean.id), {**meta, "task": task.id, "image": clean.ref})
                facts.base_commit, facts.baseline = meta["base_commit"], new_baseline
            facts.confirmed = True
            return changed

    # -- residual -------------------------------------------------------------------------------
    def state(
        self, task: Task, state: LoadedState, apply: Callable[[ImageInfo, LoadedState, str], str]
    ) -> ImageInfo:
        """The residual image; `apply(clean, state, tag)` builds it when missing and returns its id."""

        def make() -> ImageInfo:
            clean = self.clean(task)
            digest = hashlib.sha256(
                f"state-v2\0{clean.id}\0{sha256_file(state.patch_path)}".encode()
            ).hexdigest()
            tag = f"swe-residual/state-{slug(task.id)}:{digest[:16]}"
            with self.engine.file_lock(tag):
                attrs = self.engine.image_attrs(tag)
                image_id = attrs["Id"] if attrs is not None else apply(clean, state, tag)
                if attrs is None:
                    self.built.append(tag)
            return ImageInfo(ref=tag, id=image_id, facts=clean.facts, kind="residual")

        return self._cached(f"state:{task.path}:{state.id}:{state.patch_path}", make)

    def commit_conf(self, clean: ImageInfo, labels: dict[str, str]) -> dict:
        """Image config of a committed container: the clean image's entrypoint/cmd, our labels."""
        config = (self.engine.image_attrs(clean.id) or {}).get("Config") or {}
        conf = {
            "Labels": {
                **(config.get("Labels") or {}),
                **labels,
                **{k: "" for k in CONTAINER_LABELS},
                **NOT_BOOTSTRAP,
            },
            "Entrypoint": config.get("Entrypoint") or [],
            "Cmd": config.get("Cmd"),
        }
        if config.get("WorkingDir"):
            conf["WorkingDir"] = config["WorkingDir"]
        return conf

    # -- verifier -------------------------------------------------------------------------------
    def verifier(self, task: Task) -> ImageInfo:
        return self._cached(f"verifier:{task.path}", lambda: self._verifier(task))

    def _verifier(self, task: Task) -> ImageInfo:
        eng = self.engine
        clean = self.clean(task)
        dockerfile = task.tests_dir / "Dockerfile"
        if not dockerfile.is_file():
            return ImageInfo(ref=clean.ref, id=clean.id, kind="verifier")
        base_ids = self._base_images(dockerfile, skip=self.public_names(task))
        digest = hashlib.sha256(
            (
                "verifier-v2\0" + context_hash(task.tests_dir) + "\0" + clean.id + "\0" + "\0".join(base_ids)
            ).encode()
        ).hexdigest()
        tag = f"swe-residual/verifier-{slug(task.id)}:{digest[:16]}"
        with eng.file_lock(tag):
            attrs = eng.image_attrs(tag)
            if attrs is None:
                labels = {
                    IMG_KIND: "verifier",
                    IMG_KEY: digest,
                    IMG_TASK: task.id,
                    IMG_RUN: eng.run_id,
                    **NOT_BOOTSTRAP,
                }
                venv = (task.config.verifier.model_extra or {}).get("environment") or {}
                timeout = (
                    float(venv.get("build_timeout_sec", task.config.environment.build_timeout_sec))
                    if isinstance(venv, dict)
                    else task.config.environment.build_timeout_sec
                )
                image_id = self._build(
                    task.tests_dir, tag, labels, timeout, f"the verifier of task {task.id}"
                )
            else:
                image_id = attrs["Id"]
        return ImageInfo(ref=tag, id=image_id)

    # -- pulling --------------------------------------------------------------------------------
    def _pull(self, ref: str, task: Task) -> tuple[dict | None, str]:
        """Pull a task's prebuilt image when a registry answers: one plain stderr line per layer
        event (and per 10% of a layer's download), within PULL_TIMEOUT_ENV or build_timeout_sec and
        PULL_STALL_S without news. (attrs, "") when pulled; (None, why) otherwise: the caller builds
        environment/Dockerfile instead. Never raises for the registry's or the network's sake."""
        eng = self.engine
        try:
            limit = float(os.environ.get(PULL_TIMEOUT_ENV) or task.config.environment.build_timeout_sec)
        except ValueError:
            limit = task.config.environment.build_timeout_sec
        repo, tag = base_images.split_name(ref)
        log = lambda m: print(f"pull {ref}: {m}", file=sys.stderr, flush=True)
        started = time.monotonic()
        deadline = started + limit
        shown: dict[str, tuple[str, int]] = {}
        why = ""
        with eng.file_lock(f"pull:{ref}"):
            if (attrs := eng.image_attrs(ref)) is not None:  # another process pulled it meanwhile
                return attrs, ""
            client = client_for(eng.base_url, int(min(PULL_STALL_S, max(limit, 1))))
            try:
                for event in client.api.pull(repo, tag=tag, stream=True, decode=True):
                    if not isinstance(event, dict):
                        continue
                    if event.get("error"):
                        why = one_line(str(event["error"]))
                        break
                    layer, status = str(event.get("id") or ""), str(event.get("status") or "")
                    detail = event.get("progressDetail") or {}
                    total, current = detail.get("total") or 0, detail.get("current") or 0
                    step = int(10 * current / total) if total else -1
                    if layer and shown.get(layer) != (status, step):
                        shown[layer] = (status, step)
                        size = f" {current / 1e6:.1f}/{total / 1e6:.1f} MB" if total else ""
                        log(f"layer {layer}: {status}{size}")
                    elif not layer and status:
                        log(status)
                    if time.monotonic() > deadline:
                        why = f"not done within {limit:g}s"
                        break
            except ENGINE_ERRORS as exc:  # no registry answers, a refusal, a stalled stream
                why = one_line(getattr(exc, "explanation", None) or exc)
            finally:
                client.close()
            attrs = None if why else eng.image_attrs(ref)
        seconds = time.monotonic() - started
        if attrs is None:
            why = why or "no image after the pull"
            then = (
                "building environment/Dockerfile instead"
                if (task.environment_dir / "Dockerfile").is_file()
                else "and the task has no environment/Dockerfile"
            )
            log(f"not pulled ({why}) after {seconds:.1f}s; {then}")
            return None, why
        log(f"pulled in {seconds:.1f}s")
        self.pulled.append(ref)
        return attrs, ""

    # -- building -------------------------------------------------------------------------------
    def _tag(self, image_id: str, ref: str) -> None:
        repo, tag = base_images.split_name(ref)
        try:
            self.engine.api.tag(image_id, repo, tag, force=True)
        except ENGINE_ERRORS as exc:
            raise HarnessError(f"Docker: cannot tag image as {ref}: {one_line(exc)}") from None

    def _base_images(self, dockerfile: Path, skip: Iterable[str] = ()) -> list[str]:
        """FROM images of a Dockerfile, bootstrapping missing ones offline; returns their ids."""
        skip = set(skip)
        names = [n for n in base_images.base_images_of([dockerfile]) if n not in skip]
        missing = [n for n in names if self.engine.image_attrs(n) is None]
        if missing:
            try:
                base_images.bootstrap_base_images(missing, log=lambda m: print(m, file=sys.stderr))
            except Exception as exc:
                raise HarnessError(
                    f"base image(s) {', '.join(missing)} for {dockerfile} are missing and could not "
                    f"be bootstrapped offline: {one_line(exc)}"
                ) from None
        ids = []
        for n in names:
            attrs = self.engine.image_attrs(n)
            if attrs is None:
                raise HarnessError(f"base image {n} for {dockerfile} is not available")
            ids.append(attrs["Id"])
        return ids

    def _build(self, context: Path, tag: str, labels: dict[str, str], timeout: float, what: str) -> str:
        """Classic-builder build of context/Dockerfile; returns the image id. Leftover build
        containers are removed."""
        import docker

        eng = self.engine
        log_path = eng.cache_dir / "builds" / (re.sub(r"[^A-Za-z0-9_.-]+", "_", tag) + ".log")
        log_path.parent.mkdir(parents=True, exist_ok=True)
        build_client = docker.from_env(timeout=max(int(timeout), 60))
        running: list[str] = []
        error: str | None = None
        image_id: str | None = None
        deadline = time.monotonic() + timeout
        try:
            with open(log_path, "w", encoding="utf-8") as log:
                try:
                    stream = build_client.api.build(
                        path=str(context),
                        dockerfile="Dockerfile",
                        tag=tag,
                        rm=True,
                        forcerm=True,
                        labels=labels,
                        decode=True,
                        pull=False,
                    )
                    for chunk in stream:
                        text = chunk.get("stream") or ""
                        if text:
                            log.write(text)
                            m = re.search(r"Running in ([0-9a-f]{12,64})", text)
                            if m:
                                running.append(m.group(1))
                            m = re.search(r"Successfully built ([0-9a-f]{12,64})", text)
                            if m:
                                image_id = m.group(1)
                        if "error" in chunk:
                            error = str(chunk.get("error") or "").strip()
                            log.write(f"ERROR: {error}\n")
                        aux = chunk.get("aux") or {}
                        if isinstance(aux, dict) and aux.get("ID"):
                            image_id = aux["ID"]
                        if time.monotonic() > deadline:
                            error = f"build exceeded build_timeout_sec={timeout:g}"
                            break
                except ENGINE_ERRORS as exc:  # connection, read timeout, bad context
                    error = f"{type(exc).__name__}: {exc}"
                    log.write(f"ERROR: {error}\n")
        finally:
            build_client.close()
            for cid in running:  # a failed classic build leaves its step container behind
                with contextlib.suppress(*ENGINE_ERRORS):
                    eng.api.remove_container(cid, force=True)
        if error or not image_id:
            raise HarnessError(
                f"building {what} from {context / 'Dockerfile'} failed: "
                f"{(error or 'no image produced').splitlines()[0][:300]} (log: {log_path})"
            )
        attrs = eng.image_attrs(tag)
        if attrs is None:
            raise HarnessError(
                f"building {what}: image {tag} missing after a successful build (log: {log_path})"
            )
        self.built.append(tag)
        return attrs["Id"]


_COMMIT_ID = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


def parse_probe(out: bytes) -> dict:
    """probe_image.sh's output: the HEAD line, then "<blob> <path>" lines."""
    lines = out.decode("utf-8", errors="replace").splitlines()
    head = lines[0].strip() if lines else ""
    return {"base_commit": head, "baseline": [ln.split(" ", 1) for ln in lines[1:] if " " in ln]}


def _meta_holds(meta: dict, task: Task) -> bool:
    """A probe's facts are fit to cache: a repository task's image has a full commit id at HEAD of
    /app (a machine task's need not have a repository), and the baseline is a list of pairs."""
    head, baseline = meta.get("base_commit"), meta.get("baseline")
    if not isinstance(head, str) or not isinstance(baseline, list):
        return False
    if not all(isinstance(x, list) and len(x) == 2 and all(isinstance(v, str) for v in x) for x in baseline):
        return False
    return task.kind == "machine" or bool(_COMMIT_ID.fullmatch(head))

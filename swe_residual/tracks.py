"""A track: its own settings (`suites/<track>/track.toml`), where its tasks are, and the clone
`swe-residual tasks fetch` makes of them.

Settings: a track that needs Docker or downloads its tasks says so in one place instead of in code
or in every command line. A suite without the file bundles its tasks in `suites/<track>/tasks` and
runs on the local backend. `kind` says what a state of the track is: a repository (a patch, the
default) or a whole machine (replayed interactions, installed software and live processes;
docs/machine-track.md), which only the Docker backend can hold.

Where the tasks are is resolved in one place (tasks_dir_for): --tasks-dir, else the clone in the
cache, else the bundled tasks. Tracks such as DeepSWE do not ship their tasks: they are cloned once
(shallow when the server allows it) at a recorded commit. The clone is hostile input like any task
dir: nothing in it is executed, and a symlink that leaves the clone fails the fetch.

A repository that publishes a Harbor dataset manifest (`dataset.toml`, as Terminal-Bench 2.1 does)
lists a digest per task (`[[tasks]] name = "terminal-bench/<task>"`, `digest = "sha256:<hex>"`):
a SHA-256 over one record per file, sorted by path, `<relative path> NUL <sha256 hex> LF`, for
task.toml, instruction.md, README.md and trajectory.json when present and every file under
environment/, tests/, solution/ and steps/ (editor and bytecode droppings left out); checked
against the published digest of a real task (tests/test_tasks_fetch.py). A fetch whose task dirs
differ from it fails; the manifest is size-bounded and read with tomllib only.

Where the states are is resolved the same way (states_path_for): --states, else the states pack
`swe-residual states fetch` installed for the track in the same cache (swe_residual/packs/),
else the project's states.yaml.
"""

from __future__ import annotations

import contextlib
import fcntl
import fnmatch
import hashlib
import json
import os
import re
import shutil
import subprocess
import time
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from swe_residual.errors import InputError, did_you_mean
from swe_residual.registry import BACKENDS
from swe_residual.safe_read import GIT_LOW_SPEED

CONFIG_NAME = "track.toml"
_TOP_KEYS = {"default_backend", "backend_reason", "kind", "tasks", "min_state_pass_fraction"}
KINDS = ("repository", "machine")
SUITES_ROOT = Path(__file__).resolve().parent.parent / "suites"
_TASK_KEYS = {"bundled", "url", "ref", "subdir", "default_version", "versions"}
_SOURCE_KEYS = {"url", "ref", "subdir"}
# Track names as users spell the benchmark (`swe-residual tasks fetch terminal-bench`)
ALIASES = {"terminal-bench": "terminal_bench"}


@dataclass(frozen=True)
class TaskSource:
    """Where one version of a track's tasks is published: a git repository, a ref, the folder of
    the task dirs inside it."""

    url: str
    ref: str | None = None
    subdir: str = ""


@dataclass(frozen=True)
class TrackConfig:
    track: str
    default_backend: str = "local"
    backend_reason: str = ""  # why the default backend: said when it cannot run
    tasks_url: str | None = None  # git repository holding the task dirs (`swe-residual tasks fetch`)
    tasks_ref: str | None = None  # branch, tag or commit; None: the repository's default branch
    tasks_subdir: str = ""  # where the Harbor task dirs are inside that repository
    kind: str = "repository"  # repository | machine: what a state of this track is
    bundled: bool = False  # suites/<track>/tasks ships tasks (used until fetched ones exist)
    tasks_versions: tuple[tuple[str, TaskSource], ...] = ()  # published versions, by name
    default_version: str | None = None
    # validate: the share of hidden tests a state must pass (a partial solution, not an untouched
    # machine); 0 where a task may have a single test (Terminal-Bench: the paper keeps such states)
    min_state_pass_fraction: float = 0.5

    def source(self, version: str | None = None) -> tuple[str | None, TaskSource | None]:
        """(version, where it is published): `version`, else the default one, else the one
        repository the track names (version None); InputError naming the known versions."""
        versions = dict(self.tasks_versions)
        if version is None:
            version = self.default_version
        if version is None:
            return None, (
                TaskSource(self.tasks_url, self.tasks_ref, self.tasks_subdir) if self.tasks_url else None
            )
        if version not in versions:
            known = ", ".join(versions) or "none"
            raise InputError(
                f"tasks fetch {self.track}: --version {version}: no such version "
                f"({did_you_mean(version, list(versions))}known: {known})"
            )
        return version, versions[version]


def _string(path: Path, field: str, value: object) -> str:
    if not isinstance(value, str):
        raise InputError(f"{path}: {field}: must be a string, got {type(value).__name__}")
    return value


def load_track_config(suite: Path) -> TrackConfig:
    """The config of the suite dir `suite` (its name is the track); defaults when there is none."""
    path = Path(suite) / CONFIG_NAME
    track = Path(suite).name
    if not path.is_file():
        return TrackConfig(track)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise InputError(f"{path}: not valid TOML ({' '.join(str(exc).split())}); fix the file") from None
    for key in sorted(set(data) - _TOP_KEYS):
        raise InputError(
            f"{path}: {key}: unknown field ({did_you_mean(key, _TOP_KEYS)}known: "
            f"{', '.join(sorted(_TOP_KEYS))})"
        )
    backend = _string(path, "default_backend", data.get("default_backend", "local"))
    if backend not in BACKENDS:
        raise InputError(
            f"{path}: default_backend: {backend!r} is no backend (choose from {', '.join(BACKENDS)})"
        )
    kind = _string(path, "kind", data.get("kind", "repository"))
    if kind not in KINDS:
        raise InputError(f"{path}: kind: {kind!r} is no track kind (choose from {', '.join(KINDS)})")
    if kind == "machine" and backend != "docker":
        raise InputError(
            f'{path}: default_backend: a machine track needs "docker" (the local backend cannot '
            "hold machine states: installed software, configuration and live processes)"
        )
    tasks = data.get("tasks", {})
    if not isinstance(tasks, dict):
        raise InputError(f"{path}: tasks: must be a table ([tasks])")
    for key in sorted(set(tasks) - _TASK_KEYS):
        raise InputError(
            f"{path}: tasks.{key}: unknown field ({did_you_mean(key, _TASK_KEYS)}known: "
            f"{', '.join(sorted(_TASK_KEYS))})"
        )
    url, ref, subdir = _source_fields(path, "tasks", tasks)
    bundled = tasks.get("bundled", False)
    if not isinstance(bundled, bool):
        raise InputError(f"{path}: tasks.bundled: must be true or false")
    versions_table = tasks.get("versions", {})
    if not isinstance(versions_table, dict):
        raise InputError(f'{path}: tasks.versions: must be a table ([tasks.versions."2.1"])')
    if versions_table and url:
        raise InputError(f"{path}: tasks: give either url or versions, not both")
    versions: list[tuple[str, TaskSource]] = []
    for name, table in versions_table.items():
        where = f"tasks.versions.{name}"
        if not isinstance(table, dict):
            raise InputError(f"{path}: {where}: must be a table with url, ref and subdir")
        for key in sorted(set(table) - _SOURCE_KEYS):
            raise InputError(
                f"{path}: {where}.{key}: unknown field ({did_you_mean(key, _SOURCE_KEYS)}known: "
                f"{', '.join(sorted(_SOURCE_KEYS))})"
            )
        v_url, v_ref, v_subdir = _source_fields(path, where, table)
        if v_url is None:
            raise InputError(f"{path}: {where}.url: missing (the repository of version {name})")
        versions.append((name, TaskSource(v_url, v_ref, v_subdir)))
    default_version = tasks.get("default_version")
    if default_version is not None and default_version not in dict(versions):
        raise InputError(
            f"{path}: tasks.default_version: {default_version!r} is none of tasks.versions "
            f"({', '.join(dict(versions)) or 'none'})"
        )
    if versions and default_version is None:
        raise InputError(f"{path}: tasks.default_version: missing (which of tasks.versions to fetch)")
    min_pass = data.get("min_state_pass_fraction", 0.5)
    if isinstance(min_pass, bool) or not isinstance(min_pass, int | float) or not 0 <= min_pass <= 1:
        raise InputError(f"{path}: min_state_pass_fraction: {min_pass!r} is no number from 0 to 1")
    return TrackConfig(
        track,
        default_backend=backend,
        backend_reason=_string(path, "backend_reason", data.get("backend_reason", "")),
        tasks_url=url,
        tasks_ref=ref,
        tasks_subdir=subdir,
        kind=kind,
        bundled=bundled,
        tasks_versions=tuple(versions),
        default_version=default_version,
        min_state_pass_fraction=float(min_pass),
    )


def _source_fields(path: Path, where: str, table: dict) -> tuple[str | None, str | None, str]:
    """url, ref and subdir of a [tasks] table or one of its versions, checked."""
    url = _string(path, f"{where}.url", table["url"]) if "url" in table else None
    if url is not None and (not url or url.startswith("-")):
        raise InputError(f"{path}: {where}.url: {url!r} is no repository URL")
    subdir = _string(path, f"{where}.subdir", table.get("subdir", ""))
    parts = PurePosixPath(subdir).parts
    if subdir.startswith("/") or ".." in parts or "\\" in subdir:
        raise InputError(f"{path}: {where}.subdir: {subdir!r} must be a relative path inside the repository")
    ref = _string(path, f"{where}.ref", table["ref"]) if "ref" in table else None
    return url, ref or None, "/".join(parts)


def track_kind(track: str) -> str:
    """ "machine" or "repository" for a track of this project (repository when it has no suite)."""
    suite = SUITES_ROOT / track
    return load_track_config(suite).kind if suite.is_dir() else "repository"


# -- where a track's tasks are ------------------------------------------------------------------


def suite_dir(track: str, given: str | None = None) -> Path:
    """The suite directory of a track (suites/<track>); InputError naming the known ones and how
    the user gave the name (`given`; default `--track NAME`)."""
    path = SUITES_ROOT / track
    if not path.is_dir() or track.startswith(("_", ".")) or "/" in track:
        known = known_tracks()
        raise InputError(
            f"{given or f'--track {track}'}: unknown track {track!r} "
            f"({did_you_mean(track, known)}known: {', '.join(known)})"
        )
    return path


def known_tracks() -> list[str]:
    return sorted(p.name for p in SUITES_ROOT.iterdir() if p.is_dir() and p.name[0] not in "._")


def tasks_dir_for(suite_dir: Path, override: str | None) -> Path | None:
    """The one place a track's tasks dir is resolved: --tasks-dir, else the ones `swe-residual
    tasks fetch <track>` put in the cache (the fetched subdir of the clone), else the tasks bundled
    in suites/<track>/tasks (a track may bundle a few until the real ones are fetched); None when
    there are none."""
    if override:
        return Path(override).resolve()
    fetched = fetched_tasks_dir(load_track_config(suite_dir))
    if fetched is not None:
        return fetched
    bundled = suite_dir / "tasks"
    return bundled if bundled.is_dir() else None


# -- where a track's states are ------------------------------------------------------------------


BUNDLED_STATES = SUITES_ROOT.parent / "states.yaml"
PACK_SOURCE = "swe-residual-source.json"  # in an installed states pack: where it was fetched from


def states_cache_dir(track: str) -> Path:
    """Where `swe-residual states fetch` installs the states pack of `track`."""
    return cache_root() / "states" / track


def fetched_states_file(track: str) -> Path | None:
    """The states file of the pack installed for `track`, when an install completed (it is renamed
    into place whole, its source record written first); None otherwise."""
    pack = states_cache_dir(track)
    if pack.is_symlink() or not pack.is_dir():
        return None
    record, states = pack / PACK_SOURCE, pack / "states.yaml"
    if record.is_symlink() or not record.is_file() or states.is_symlink() or not states.is_file():
        return None
    return states


def states_path_for(track: str, override: str | Path | None) -> Path:
    """The one place a track's states file is resolved: --states, else the fetched pack of the
    track, else the project's states.yaml."""
    if override:
        return Path(override)
    return fetched_states_file(track) or BUNDLED_STATES


# -- the clone of a track's task repository (`swe-residual tasks fetch`) ---------------------------


CACHE_ENV = "SWE_RESIDUAL_CACHE"
SOURCE_RECORD = "swe-residual-source.json"  # in the clone's .git dir: what was fetched, at which commit
UPDATING = "swe-residual-updating"  # in .git while a checkout is replaced: the tasks are not usable
GIT_TIMEOUT_S = 1800.0
MAX_RECORD_BYTES = 64 << 10


def cache_root() -> Path:
    """$SWE_RESIDUAL_CACHE, else $XDG_CACHE_HOME/swe-residual, else ~/.cache/swe-residual."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser().absolute()
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg and Path(xdg).is_absolute():
        return Path(xdg) / "swe-residual"
    return Path.home() / ".cache" / "swe-residual"


def clone_dir(track: str) -> Path:
    return cache_root() / "tasks" / track


def read_source(clone: Path) -> dict | None:
    """The record of the last complete fetch into `clone`, None when there is none."""
    path = clone / ".git" / SOURCE_RECORD
    if path.is_symlink() or not path.is_file() or path.stat().st_size > MAX_RECORD_BYTES:
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def fetched_tasks_dir(cfg: TrackConfig) -> Path | None:
    """The track's task dirs in the default cache location, when a fetch completed there (in the
    subdir the fetch recorded: versions of a track keep their task dirs in different folders)."""
    clone = clone_dir(cfg.track)
    record = read_source(clone) if not clone.is_symlink() else None
    if record is None or (clone / ".git" / UPDATING).exists():
        return None
    subdir = record.get("subdir", cfg.tasks_subdir)
    if not isinstance(subdir, str) or subdir.startswith("/") or ".." in PurePosixPath(subdir).parts:
        return None
    tdir = (clone / subdir).resolve() if subdir else clone.resolve()
    return tdir if tdir.is_dir() and _inside(tdir, clone.resolve()) else None


# -- Harbor's dataset manifest (dataset.toml) and the content digest of a task dir ----------------

MANIFEST = "dataset.toml"
MAX_MANIFEST_BYTES = 4 << 20
DIGEST_FILES = ("task.toml", "instruction.md", "README.md", "trajectory.json")
DIGEST_DIRS = ("environment", "tests", "solution", "steps")
IGNORED = ("__pycache__", "*.pyc", ".DS_Store", "*.swp", "*.swo", "*~")
DIGEST_RE = re.compile(r"sha256:[0-9a-f]{64}")


def _ignored(rel: str) -> bool:
    return any(fnmatch.fnmatchcase(part, g) for part in rel.split("/") for g in IGNORED)


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def task_digest(task_dir: Path) -> str:
    """`sha256:<hex>` of a task dir as Harbor's dataset manifests pin it; InputError when a
    directory inside is a symlink (the record format cannot say where it points)."""
    files: list[str] = [name for name in DIGEST_FILES if (task_dir / name).is_file()]
    for top in DIGEST_DIRS:
        root = task_dir / top
        if root.is_symlink():
            raise InputError(f"{root}: a symbolic link to a directory; a task digest cannot cover it")
        if not root.is_dir():
            continue
        for path in sorted(root.rglob("*")):
            rel = path.relative_to(task_dir).as_posix()
            if _ignored(rel):
                continue
            if path.is_symlink() and path.is_dir():
                raise InputError(f"{path}: a symbolic link to a directory; a task digest cannot cover it")
            if path.is_file():
                files.append(rel)
    h = hashlib.sha256()
    for rel in sorted(files):
        h.update(f"{rel}\0{_file_sha256(task_dir / rel)}\n".encode("utf-8", "surrogateescape"))
    return "sha256:" + h.hexdigest()


def read_manifest(path: Path) -> dict[str, str]:
    """{task short name: digest} of a dataset.toml; InputError (one line) for what is not one."""
    try:
        size = path.stat().st_size
        if size > MAX_MANIFEST_BYTES:
            raise InputError(f"{path}: {size} bytes, more than a dataset manifest has ({MAX_MANIFEST_BYTES})")
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise InputError(
            f"{path}: not a readable TOML dataset manifest ({' '.join(str(exc).split())[:200]})"
        ) from None
    tasks = data.get("tasks", [])
    if not isinstance(tasks, list):
        raise InputError(f"{path}: tasks: must be an array of tables ([[tasks]])")
    out: dict[str, str] = {}
    for i, entry in enumerate(tasks):
        where = f"{path}: tasks[{i}]"
        if not isinstance(entry, dict):
            raise InputError(f"{where}: must be a table with name and digest")
        name, digest = entry.get("name"), entry.get("digest")
        if (
            not isinstance(name, str)
            or not re.fullmatch(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+", name)
            or ".." in name
        ):
            raise InputError(f"{where}.name: {name!r} is no task name of the form org/name")
        if not isinstance(digest, str) or not DIGEST_RE.fullmatch(digest):
            raise InputError(f"{where}.digest: {digest!r} is no digest of the form sha256:<64 hex digits>")
        short = name.split("/", 1)[1]
        if out.get(short, digest) != digest:
            raise InputError(f"{where}: task {name} is listed twice with different digests")
        out[short] = digest
    return out


@dataclass
class DigestCheck:
    """What a tasks dir holds against its dataset manifest."""

    manifest: Path
    matched: list[str] = field(default_factory=list)
    mismatched: list[str] = field(default_factory=list)  # one line each: task, expected, found
    missing: list[str] = field(default_factory=list)  # listed, no such task dir
    unlisted: list[str] = field(default_factory=list)  # task dirs the manifest does not list


def check_digests(tasks_dir: Path, manifest: Path) -> DigestCheck:
    """Every task dir's digest against the one the manifest lists for it."""
    listed = read_manifest(manifest)
    check = DigestCheck(manifest)
    dirs = {
        c.name: c
        for c in tasks_dir.iterdir()
        if c.is_dir() and not c.is_symlink() and (c / "task.toml").is_file()
    }
    for name in sorted(listed):
        if name not in dirs:
            check.missing.append(name)
            continue
        try:
            found = task_digest(dirs[name])
        except InputError as exc:
            check.mismatched.append(f"{name}: {exc}")
            continue
        if found == listed[name]:
            check.matched.append(name)
        else:
            check.mismatched.append(f"{name}: digest {found}, {manifest.name} lists {listed[name]}")
    check.unlisted = sorted(set(dirs) - set(listed))
    return check


@dataclass
class FetchResult:
    track: str
    url: str
    ref: str | None  # None: the repository's default branch
    commit: str
    clone: Path
    tasks_dir: Path
    n_tasks: int
    previous: str | None  # the commit before an update; None for a new clone
    version: str | None = None
    digests: DigestCheck | None = None  # None: the repository has no dataset manifest


def _git(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **GIT_LOW_SPEED, "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"}
    try:
        proc = subprocess.run(
            ["git", *args],
            check=False,
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
        )
    except FileNotFoundError:
        raise InputError("tasks fetch: git is not installed; install it (apt-get install git)") from None
    except subprocess.TimeoutExpired:
        raise InputError(
            f"tasks fetch: `git {args[0]}` did not finish within {GIT_TIMEOUT_S:.0f} s; "
            "check your network or use --url with a closer mirror"
        ) from None
    if check and proc.returncode != 0:
        raise InputError(f"tasks fetch: `git {' '.join(args[:2])}` failed in {cwd}: {_why(proc)}")
    return proc


def _why(proc: subprocess.CompletedProcess[str]) -> str:
    lines = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip()]
    fatal = [ln for ln in lines if ln.startswith(("fatal:", "error:"))]
    return (fatal or lines or [f"exit status {proc.returncode}"])[0][:300]


def _fetch(repo: Path, url: str, ref: str | None) -> str:
    """Fetch `ref` (default: the remote's HEAD) from origin; return the commit it names."""
    shallow = _git(repo, "fetch", "-q", "--depth", "1", "--no-tags", "origin", ref or "HEAD", check=False)
    if shallow.returncode == 0:
        return _git(repo, "rev-parse", "FETCH_HEAD^{commit}").stdout.strip()
    # Not every server serves one commit shallowly (dumb HTTP; an abbreviated hash is no ref at
    # all): fetch the whole history and resolve the ref locally.
    what = f"{ref or 'the default branch'} of {url}"
    unshallow = (
        ["--unshallow"] if _git(repo, "rev-parse", "--is-shallow-repository").stdout.strip() == "true" else []
    )
    full = _git(
        repo,
        "fetch",
        "-q",
        *unshallow,
        "--tags",
        "origin",
        "+refs/heads/*:refs/remotes/origin/*",
        check=False,
    )
    if full.returncode != 0:
        raise InputError(
            f"tasks fetch: cannot fetch {what}: {_why(shallow)}; check the URL and your network "
            "(--url takes a mirror)"
        )
    if ref is None:
        head = _git(repo, "fetch", "-q", "origin", "HEAD", check=False)
        if head.returncode != 0:
            raise InputError(f"tasks fetch: cannot fetch {what}: {_why(head)}")
        return _git(repo, "rev-parse", "FETCH_HEAD^{commit}").stdout.strip()
    for candidate in (f"refs/remotes/origin/{ref}", f"refs/tags/{ref}", ref):
        found = _git(
            repo,
            "rev-parse",
            "--verify",
            "--quiet",
            "--end-of-options",
            f"{candidate}^{{commit}}",
            check=False,
        )
        if found.returncode == 0:
            return found.stdout.strip()
    raise InputError(f"tasks fetch: --ref {ref}: no branch, tag or commit of that name in {url}")


def _checkout(repo: Path, commit: str) -> None:
    _git(repo, "-c", "advice.detachedHead=false", "checkout", "-q", "--force", "--detach", commit)
    _git(repo, "clean", "-q", "-ffdx")


def _check_tree(clone: Path, cfg: TrackConfig, url: str, commit: str, sub: str) -> tuple[Path, int]:
    """The tasks dir (`sub`) inside the checkout and its number of task dirs; InputError when the
    checkout links outside itself or holds no task dirs where the track expects them."""
    root = clone.resolve()
    where = f"{url} at {commit[:12]}"
    listing = _git(clone, "ls-files", "-s", "-z").stdout
    for entry in filter(None, listing.split("\0")):
        meta, _, rel = entry.partition("\t")
        if meta.startswith("120000 "):
            link = clone / rel
            if not _inside(Path(os.path.realpath(link)), root):
                raise InputError(
                    f"tasks fetch: {where}: {rel} links outside the repository "
                    f"(-> {os.readlink(link)}); these tasks are not used"
                )
    tdir = clone / sub if sub else clone
    if tdir.is_symlink() or not tdir.is_dir():
        raise InputError(
            f"tasks fetch: {where} has no {sub or '.'}/ (where the task dirs of track "
            f"{cfg.track!r} are); check --url and --ref"
        )
    n = sum(1 for c in tdir.iterdir() if c.is_dir() and not c.is_symlink() and (c / "task.toml").is_file())
    if n == 0:
        raise InputError(
            f"tasks fetch: {where}: no task dirs (folders holding task.toml) in {sub or '.'}/; "
            "check --url and --ref"
        )
    return tdir, n


def _check_manifest(clone: Path, tdir: Path, url: str, commit: str) -> DigestCheck | None:
    """The task dirs against the digests of the dataset manifest beside them or at the top of the
    repository (None when there is none); InputError naming every task whose content differs."""
    for path in (tdir / MANIFEST, clone / MANIFEST):
        if path.is_file() and not path.is_symlink():
            check = check_digests(tdir, path)
            if check.mismatched:
                shown = "; ".join(check.mismatched[:5])
                more = f"; and {len(check.mismatched) - 5} more" if len(check.mismatched) > 5 else ""
                raise InputError(
                    f"tasks fetch: {url} at {commit[:12]}: {len(check.mismatched)} task dir(s) differ from "
                    f"the digests {path.relative_to(clone)} lists ({shown}{more}); these tasks are not used"
                )
            return check
    return None


def _digest_record(check: DigestCheck | None, clone: Path) -> dict | None:
    if check is None:
        return None
    return {
        "manifest": str(check.manifest.relative_to(clone)),
        "matched": len(check.matched),
        "missing": check.missing[:200],
        "unlisted": check.unlisted[:200],
    }


@contextlib.contextmanager
def locked(dest: Path) -> Iterator[None]:
    """One fetch per destination at a time (two shells, or CI jobs sharing a cache)."""
    with open(dest.parent / f".{dest.name}.lock", "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _write_record(clone: Path, record: dict) -> None:
    tmp = clone / ".git" / f"{SOURCE_RECORD}.tmp"
    tmp.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, clone / ".git" / SOURCE_RECORD)


def fetch_tasks(
    cfg: TrackConfig,
    *,
    ref: str | None = None,
    dest: Path | str | None = None,
    url: str | None = None,
    version: str | None = None,
) -> FetchResult:
    """Clone (or update) the track's task repository - of `version`, for a track that publishes
    several - at `ref` into `dest` (default: the cache); the task dirs are checked against the
    digests of a dataset manifest (dataset.toml) the repository holds."""
    version, source = cfg.source(version)
    url = url or (source.url if source else None)
    if not url:
        raise InputError(
            f"tasks fetch {cfg.track}: the track names no task repository (suites/{cfg.track}/"
            "track.toml [tasks] url); pass --url URL"
        )
    if url.startswith("-"):
        raise InputError(f"tasks fetch: --url {url}: not a repository URL")
    ref = ref or (source.ref if source else None)
    sub = source.subdir if source else cfg.tasks_subdir
    if ref is not None and (not ref.strip() or ref.startswith("-")):
        raise InputError(f"tasks fetch: --ref {ref!r}: not a branch, tag or commit")
    dest = Path(dest).expanduser().absolute() if dest else clone_dir(cfg.track)
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"tasks fetch: {dest.parent}: cannot be created ({exc.strerror or exc})") from None
    with locked(dest):
        if dest.is_symlink() or (dest.exists() and not dest.is_dir()):
            raise InputError(f"tasks fetch: {dest} is not a directory; remove it or choose another --dest")
        old = read_source(dest) if dest.is_dir() else None
        if dest.is_dir() and old is None and any(dest.iterdir()):
            raise InputError(
                f"tasks fetch: {dest} exists and was not made by `swe-residual tasks fetch`; "
                "remove it or choose another --dest"
            )
        record = {"track": cfg.track, "url": url, "ref": ref, "subdir": sub, "version": version}
        if old is not None:  # update in place
            previous = old.get("commit")
            _git(dest, "remote", "set-url", "origin", url)
            commit = _fetch(dest, url, ref)
            marker = dest / ".git" / UPDATING
            marker.touch()
            try:
                _checkout(dest, commit)
                tdir, n = _check_tree(dest, cfg, url, commit, sub)
                check = _check_manifest(dest, tdir, url, commit)
            except InputError:
                if isinstance(previous, str):  # the last good fetch stays usable
                    _checkout(dest, previous)
                    marker.unlink()
                raise
            _write_record(
                dest,
                {
                    **record,
                    "commit": commit,
                    "n_tasks": n,
                    "dataset": _digest_record(check, dest),
                    "fetched_at": _now(),
                },
            )
            marker.unlink()
            return FetchResult(cfg.track, url, ref, commit, dest, tdir, n, previous, version, check)
        partial = dest.parent / f".{dest.name}.partial-{os.getpid()}"
        shutil.rmtree(partial, ignore_errors=True)
        try:
            partial.mkdir()
            _git(partial, "init", "-q")
            _git(partial, "remote", "add", "origin", url)
            commit = _fetch(partial, url, ref)
            _checkout(partial, commit)
            ptdir, n = _check_tree(partial, cfg, url, commit, sub)
            check = _check_manifest(partial, ptdir, url, commit)
            _write_record(
                partial,
                {
                    **record,
                    "commit": commit,
                    "n_tasks": n,
                    "dataset": _digest_record(check, partial),
                    "fetched_at": _now(),
                },
            )
            if dest.is_dir():
                dest.rmdir()  # empty (checked above)
            os.rename(partial, dest)
        finally:
            shutil.rmtree(partial, ignore_errors=True)
        tdir = dest / sub if sub else dest
        if check is not None:
            check.manifest = dest / check.manifest.relative_to(partial)
        return FetchResult(cfg.track, url, ref, commit, dest, tdir, n, None, version, check)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())

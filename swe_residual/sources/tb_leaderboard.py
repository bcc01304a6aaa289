"""Terminal-Bench 2's published trials: the `harborframework/terminal-bench-2-leaderboard` layout.

    submissions/terminal-bench/<version>/<agent>__<model>/metadata.yaml
                                                         <job>/config.json, result.json
                                                         <job>/<trial>/  a Harbor trial dir

Folder names are display names: a trial's agent and model are read from its own config.json
(TrialConfig `agent.name` / `import_path` / `model_name`) and result.json (`agent_info`), never from
the folder. The same layout is read from three places, each a Tree: a local dir (a partial
download, read in place, no symlink followed), the Hugging Face dataset over http(s) or a mirror
that answers its API (`/api/datasets/<repo>/tree/<rev>/<path>` listings, paged by `Link`;
`/datasets/<repo>/resolve/<rev>/<path>` files), or a git URL (a bare, blob-less clone: the tree is
listed once, a file's blob fetched only when it is read; nothing is checked out, nothing run).

The index reads metadata.yaml and each trial's config.json and result.json only; the other files
of a trial are fetched for the trials selected (`fetch_trial`). Everything is hostile input:
names must be safe path components, sizes are bounded, JSON is depth-limited, YAML anchors are
refused, symlinks and special files are never read; each problem is one line naming the file.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from swe_residual.errors import InputError
from swe_residual.safe_read import (
    Unsafe,
    list_dir,
    open_dir,
    open_subdir,
    parse_json,
    read_at,
    read_bytes,
    valid_text,
)
from swe_residual.sources.deepswe_release import Http, Oversize, Transient

ROOT = "submissions/terminal-bench"
METADATA = "metadata.yaml"
MAX_METADATA = 1 << 20
MAX_JSON = 16 << 20  # config.json, result.json, ctrf.json (as sources/harbor_trials.py)
MAX_TRAJECTORY = 64 << 20
MAX_FILE = 16 << 20  # any other file of a trial
MAX_TRIAL = 96 << 20  # all files fetched for one trial
MAX_EPISODES = 5000
MAX_LISTING = 100_000  # entries of one directory
#: a name that becomes a path component of the work dir (submission, job, trial, file)
SAFE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._+@=,-]{0,199}$")
_EPISODE = re.compile(r"^episode-(\d{1,6})$")
#: the files of a trial fetched for its import, beyond config.json and result.json
TRIAL_FILES = ("exception.txt", "agent/trajectory.json")
TRIAL_DIRS = ("verifier",)


def safe_name(name: str) -> bool:
    return bool(SAFE_NAME.match(name)) and ".." not in name


# -- trees: where the layout is read from ---------------------------------------------------------


class Tree:
    """A read-only view of the layout. `list(rel)` -> [(name, kind)] with kind file/dir/symlink/
    other; `read(rel, limit)` -> bytes, None when absent, Unsafe when there but not readable."""

    where: str
    local: Path | None = None  # a local dir read in place (no download)

    def list(self, rel: str) -> list[tuple[str, str]]:
        raise NotImplementedError

    def read(self, rel: str, limit: int) -> bytes | None:
        raise NotImplementedError


class LocalTree(Tree):
    def __init__(self, root: Path):
        self.local = root
        self.where = str(root)

    def list(self, rel: str) -> list[tuple[str, str]]:
        return list_dir(self.local, rel)  # type: ignore[arg-type]

    def read(self, rel: str, limit: int) -> bytes | None:
        return read_bytes(self.local, rel, limit)  # type: ignore[arg-type]


class HfTree(Tree):
    """A Hugging Face dataset (or a mirror answering its API): SOURCE is
    `https://HOST/datasets/ORG/NAME[/tree/REV[/PATH]]`."""

    def __init__(self, url: str, http: Http):
        parts = urllib.parse.urlsplit(url)
        path = [p for p in parts.path.split("/") if p]
        if len(path) < 3 or path[0] != "datasets":
            raise InputError(
                f"{url}: not a Hugging Face dataset URL (https://HOST/datasets/ORG/NAME[/tree/REV])"
            )
        self.repo = f"{path[1]}/{path[2]}"
        rest = path[3:]
        self.rev, self.prefix = "main", ""
        if rest[:1] == ["tree"] and len(rest) >= 2:
            self.rev, self.prefix = rest[1], "/".join(rest[2:])
        elif rest:
            raise InputError(f"{url}: after the dataset name only /tree/REV[/PATH] may follow")
        self.base = f"{parts.scheme}://{parts.netloc}"
        self.http, self.where = http, url

    def _path(self, rel: str) -> str:
        return "/".join(p for p in (self.prefix, rel) if p)

    def list(self, rel: str) -> list[tuple[str, str]]:
        path = self._path(rel)
        url: str | None = (
            f"{self.base}/api/datasets/{self.repo}/tree/{urllib.parse.quote(self.rev, safe='')}/"
            f"{urllib.parse.quote(path)}?expand=false"
        )
        out: list[tuple[str, str]] = []
        pages = 0
        while url:
            try:
                got = self.http.get(url, 64 << 20)
            except (Transient, Oversize) as exc:
                raise InputError(f"{url}: listing cannot be fetched: {exc}") from None
            if got.data is None:
                return []  # not there (404)
            try:
                entries = parse_json(got.data, url)
            except Unsafe as exc:
                raise InputError(str(exc)) from None
            if not isinstance(entries, list):
                raise InputError(f"{url}: not a listing (a JSON list of entries)")
            for e in entries:
                p = e.get("path") if isinstance(e, dict) else None
                if not isinstance(p, str):
                    continue
                parent, _, name = p.rpartition("/")
                if parent != path or not name:
                    continue  # an entry outside the dir listed: ignored
                kind = {"directory": "dir", "file": "file"}.get(e.get("type"), "other")
                out.append((name, kind))
            pages += 1
            if len(out) > MAX_LISTING or pages > 1000:
                raise InputError(f"{url}: more than {MAX_LISTING} entries in one directory")
            url = _next_link(got.link, url)
        return sorted(out)

    def read(self, rel: str, limit: int) -> bytes | None:
        url = (
            f"{self.base}/datasets/{self.repo}/resolve/{urllib.parse.quote(self.rev, safe='')}/"
            f"{urllib.parse.quote(self._path(rel))}"
        )
        try:
            got = self.http.get(url, limit)
        except Oversize as exc:
            raise Unsafe(f"{url}: {exc}; not read") from None
        except Transient as exc:
            raise FetchFailed(f"{url}: {exc}") from None
        return got.data


class FetchFailed(Exception):
    """A file that could not be fetched after the retries: the trial is not finished (rerun)."""


def _next_link(header: str | None, current: str) -> str | None:
    for part in (header or "").split(","):
        if 'rel="next"' in part and "<" in part and ">" in part:
            nxt = urllib.parse.urljoin(current, part[part.index("<") + 1 : part.index(">")])
            cur, new = urllib.parse.urlsplit(current), urllib.parse.urlsplit(nxt)
            return nxt if (cur.scheme, cur.netloc) == (new.scheme, new.netloc) else None
    return None


class GitTree(Tree):
    """A git URL: cloned bare and blob-less into `cache` (blobs come when read), listed once."""

    def __init__(self, url: str, cache: Path, ref: str | None = None):
        self.where, self.cache = url, cache
        env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_CONFIG_NOSYSTEM": "1"}
        self.env = env
        if not (cache / "HEAD").is_file():
            cache.parent.mkdir(parents=True, exist_ok=True)
            cmd = ["git", "clone", "--quiet", "--bare", "--filter=blob:none", "--depth", "1"]
            cmd += ["--branch", ref] if ref else []
            res = subprocess.run(
                [*cmd, "--", url, str(cache)], capture_output=True, text=True, env=env, timeout=3600
            )
            if res.returncode != 0:
                raise InputError(f"{url}: git clone failed: {(res.stderr.strip().splitlines() or ['?'])[-1]}")
        res = subprocess.run(
            ["git", "-C", str(cache), "ls-tree", "-r", "-t", "-z", "--long", "HEAD"],
            capture_output=True,
            env=env,
            timeout=600,
        )
        if res.returncode != 0:
            raise InputError(
                f"{url}: git ls-tree failed: {res.stderr.decode(errors='replace').strip()[:200]}"
            )
        self.entries: dict[str, tuple[str, str, int]] = {}  # path -> (mode, oid, size)
        self.children: dict[str, list[tuple[str, str]]] = {}
        for item in res.stdout.split(b"\0"):
            if not item:
                continue
            meta, _, path_b = item.partition(b"\t")
            fields = meta.split()
            if len(fields) < 4:
                continue
            mode, kind_, oid, size = (f.decode() for f in fields[:4])
            path = path_b.decode("utf-8", "surrogateescape")
            kind = (
                "dir"
                if kind_ == "tree"
                else "symlink"
                if mode == "120000"
                else "file"
                if kind_ == "blob"
                else "other"
            )
            self.entries[path] = (kind, oid, int(size) if size.isdigit() else 0)
            parent, _, name = path.rpartition("/")
            self.children.setdefault(parent, []).append((name, kind))
        self._lock = threading.Lock()

    def list(self, rel: str) -> list[tuple[str, str]]:
        return sorted(self.children.get(rel, []))

    def read(self, rel: str, limit: int) -> bytes | None:
        entry = self.entries.get(rel)
        if entry is None:
            return None
        kind, oid, size = entry
        where = f"{self.where}:{rel}"
        if kind == "symlink":
            raise Unsafe(f"{where}: a symlink; not followed")
        if kind != "file":
            raise Unsafe(f"{where}: not a regular file; not read")
        if size > limit:
            raise Unsafe(f"{where}: {size} bytes, over the {limit >> 20} MiB bound; not read")
        res = subprocess.run(
            ["git", "-C", str(self.cache), "cat-file", "blob", oid],
            capture_output=True,
            env=self.env,
            timeout=600,
        )
        if res.returncode != 0:
            raise FetchFailed(
                f"{where}: git cat-file failed: {res.stderr.decode(errors='replace').strip()[:200]}"
            )
        if len(res.stdout) > limit:
            raise Unsafe(f"{where}: {len(res.stdout)} bytes, over the {limit >> 20} MiB bound; not read")
        return res.stdout


def open_tree(source: str, http: Http, cache: Path) -> Tree:
    """The Tree a SOURCE names: an http(s) dataset URL, a git URL (`git+...`, `....git`, ssh), or a dir."""
    parts = urllib.parse.urlsplit(source)
    if source.startswith("git+") or source.endswith(".git") or parts.scheme in ("git", "ssh"):
        url = source[4:] if source.startswith("git+") else source
        key = hashlib.sha256(url.encode()).hexdigest()[:16]
        return GitTree(url, cache / f"git-{key}")
    if parts.scheme in ("http", "https"):
        return HfTree(source, http)
    if parts.scheme == "file":
        source = urllib.parse.unquote(parts.path)
    elif parts.scheme and len(parts.scheme) > 1:
        raise InputError(f"{source}: not a dir, an http(s) URL or a git URL")
    path = Path(source)
    if not path.is_dir():
        raise InputError(f"{source}: no such directory (a download of the leaderboard's submissions)")
    return LocalTree(path.absolute())


# -- the index: metadata.yaml, config.json and result.json of every trial -------------------------


@dataclass
class Submission:
    version: str
    name: str  # the folder: <agent>__<model>, a display name
    rel: str
    metadata: dict = field(default_factory=dict)


@dataclass
class TrialRef:
    """What the index knows of one trial, before any of its other files is fetched."""

    rel: str  # below the tree's root
    submission: Submission
    job: str
    trial: str  # the folder name
    trial_name: str | None = None  # result.json
    trial_id: str | None = None
    result_sha256: str = ""
    agent: str | None = None  # config.json agent.name, else import_path, else agent_info.name
    model: str | None = None  # config.json agent.model_name, else agent_info.model_info
    task_refs: list[str] = field(default_factory=list)
    exception: str | None = None
    finished: bool = True

    @property
    def key(self) -> str:
        """What identifies the trial wherever it is read from (the importers' run id key)."""
        return f"harbor\0{self.trial_id or self.result_sha256}"


@dataclass
class Index:
    trials: list[TrialRef] = field(default_factory=list)
    submissions: list[Submission] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # one line each: a file or entry refused
    unfinished: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def agents(self) -> set[str]:
        return {t.agent for t in self.trials if t.agent}

    def models(self) -> set[str]:
        names = {t.model for t in self.trials if t.model}
        return names | {m.rsplit("/", 1)[-1] for m in names}


def _dict(v: Any) -> dict:
    return v if isinstance(v, dict) else {}


def _str(v: Any) -> str | None:
    """A non-empty string field as valid text of at most 300 characters (ASCII ones as they are)."""
    if not isinstance(v, str) or not v or v.isspace():
        return None
    return v if len(v) <= 300 and v.isascii() and v.isprintable() else valid_text(v, 300)


_YAML_ALIAS = re.compile(rb"(^|[\s\[{,:-])[&*][A-Za-z0-9_-]")


def read_metadata(tree: Tree, rel: str) -> tuple[dict, str | None]:
    """A submission's metadata.yaml (agent_url, agent_display_name, models[...]), and the one line
    saying why it was not read."""
    where = f"{tree.where}/{rel}"
    try:
        raw = tree.read(rel, MAX_METADATA)
    except (Unsafe, FetchFailed) as exc:
        return {}, str(exc)
    if raw is None:
        return {}, None
    if _YAML_ALIAS.search(raw):
        return {}, f"{where}: YAML anchors or aliases; not read"
    import yaml

    try:
        data = yaml.load(raw.decode("utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except (yaml.YAMLError, UnicodeDecodeError, RecursionError) as exc:
        return {}, f"{where}: invalid YAML: {str(getattr(exc, 'problem', exc))[:200]}"
    if not isinstance(data, dict):
        return {}, f"{where}: not a mapping (agent_url, agent_display_name, models); not read"
    try:
        return json.loads(json.dumps(data, default=str)), None  # plain JSON values only
    except (ValueError, RecursionError):
        return {}, f"{where}: nested too deep; not read"


def _layout(tree: Tree) -> list[tuple[str, str]]:
    """(version, rel) of every version dir the tree holds: the dataset's root, its
    submissions/terminal-bench/, a version dir, or one submission dir."""
    names = dict(tree.list(""))
    if names.get("submissions") == "dir":
        return [(v, f"{ROOT}/{v}") for v, k in tree.list(ROOT) if k == "dir"]
    if METADATA in names:
        return [("", "")]  # one submission: its own root
    kids = [n for n, k in names.items() if k == "dir"]
    if any(n for n in kids if METADATA in dict(tree.list(n))):
        return [("", "")]  # a version dir
    return [(v, v) for v in kids if any(k == "dir" for _, k in tree.list(v))]  # terminal-bench/


def build_index(tree: Tree, jobs: int = 8) -> Index:
    """Every trial of the tree, with its config.json and result.json read (concurrently: -j)."""
    t0 = time.perf_counter()
    idx = Index()
    refs: list[TrialRef] = []
    for version, vrel in _layout(tree):
        if version and not safe_name(version):
            idx.problems.append(f"{tree.where}/{vrel}: version name not a safe name; refused")
            continue
        subs = [("", vrel)] if METADATA in dict(tree.list(vrel)) else None
        if subs is None:
            subs = [(n, f"{vrel}/{n}".lstrip("/")) for n, k in tree.list(vrel) if k == "dir"]
        for name, srel in subs:
            name = name or (srel.rsplit("/", 1)[-1] if srel else Path(tree.where).name)
            if not safe_name(name):
                idx.problems.append(f"{tree.where}/{srel}: submission name not a safe name; refused")
                continue
            meta, problem = read_metadata(tree, f"{srel}/{METADATA}".lstrip("/"))
            if problem:
                idx.problems.append(problem)
            sub = Submission(version or "?", name, srel, meta)
            idx.submissions.append(sub)
            for job, kind in tree.list(srel):
                jrel = f"{srel}/{job}".lstrip("/")
                if kind in ("symlink", "other"):
                    idx.problems.append(f"{tree.where}/{jrel}: a symlink or special file; not followed")
                    continue
                if kind != "dir":
                    continue
                if not safe_name(job):
                    idx.problems.append(f"{tree.where}/{jrel}: job name not a safe name; refused")
                    continue
                for trial, tkind in tree.list(jrel):
                    trel = f"{jrel}/{trial}"
                    if tkind in ("symlink", "other"):
                        idx.problems.append(f"{tree.where}/{trel}: a symlink or special file; not followed")
                    elif tkind == "dir":
                        if not safe_name(trial):
                            idx.problems.append(f"{tree.where}/{trel}: trial name not a safe name; refused")
                        else:
                            refs.append(TrialRef(trel, sub, job, trial))
    if tree.local is not None:
        # reading is mostly system calls, which release the GIL: a few threads, whole jobs each
        step = max(1, -(-len(refs) // 4))
        chunks = [refs[i : i + step] for i in range(0, len(refs), step)]
        with ThreadPoolExecutor(max_workers=max(1, min(4, len(chunks)))) as pool:
            raws = [r for part in pool.map(lambda c: _read_local(tree.local, c), chunks) for r in part]
    elif jobs > 1:
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            raws = list(pool.map(lambda r: _read_remote(tree, r), refs))
    else:
        raws = [_read_remote(tree, r) for r in refs]
    for ref, raw in zip(refs, raws):
        problem = raw if isinstance(raw, str) else _fill(ref, *raw, where=f"{tree.where}/{ref.rel}")
        if problem == "unfinished":
            idx.unfinished.append(ref.rel)
        elif problem:
            idx.problems.append(problem)
        elif ref.finished:
            idx.trials.append(ref)
    idx.seconds = time.perf_counter() - t0
    return idx


Raw = tuple[bytes | None, bytes | None] | str  # (config.json, result.json), or the one line of a problem


def _read_remote(tree: Tree, ref: TrialRef) -> Raw:
    try:
        return tree.read(f"{ref.rel}/config.json", MAX_JSON), tree.read(f"{ref.rel}/result.json", MAX_JSON)
    except (Unsafe, FetchFailed) as exc:
        return str(exc)


def _read_local(root: Path, refs: list[TrialRef]) -> list[Raw]:
    """config.json and result.json of every trial, each job dir opened once (the index of a
    50,000-trial download reads 100,000 files: a walk from the root per file would double it)."""
    out: list[Raw] = []
    job_rel, jfd = None, None
    try:
        for ref in refs:
            parent, _, name = ref.rel.rpartition("/")
            if parent != job_rel:
                if jfd is not None:
                    os.close(jfd)
                job_rel, jfd = parent, None
                try:
                    jfd = open_dir(root, parent)
                except Unsafe:
                    jfd = None
            tfd = open_subdir(jfd, name) if jfd is not None else None
            if tfd is None:
                out.append(f"{root}/{ref.rel}: not a directory; not read")
                continue
            where = f"{root}/{ref.rel}/"
            try:
                out.append(
                    (
                        read_at(tfd, "config.json", MAX_JSON, where + "config.json"),
                        read_at(tfd, "result.json", MAX_JSON, where + "result.json"),
                    )
                )
            except Unsafe as exc:
                out.append(str(exc))
            finally:
                os.close(tfd)
    finally:
        if jfd is not None:
            os.close(jfd)
    return out


class _Config(msgspec.Struct):
    """The fields of a TrialConfig the index reads (the rest is skipped unparsed)."""

    agent: Any = None
    task: Any = None


class _Result(msgspec.Struct):
    """The fields of a TrialResult the index reads."""

    trial_name: Any = None
    id: Any = None
    task_name: Any = None
    task_id: Any = None
    agent_info: Any = None
    exception_info: Any = None
    config: msgspec.Raw = msgspec.Raw(b"null")


def _decode(raw: bytes, kind: type, where: str) -> Any:
    """A bounded file's fields (msgspec: unknown fields skipped; nesting past Python's recursion
    limit is an error); Unsafe naming the file."""
    try:
        return msgspec.json.decode(raw, type=kind)
    except RecursionError:
        raise Unsafe(f"{where}: invalid JSON: nested too deep") from None
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise Unsafe(f"{where}: invalid JSON: {str(exc)[:200]}") from None


def _fill(ref: TrialRef, raw_cfg: bytes | None, raw_res: bytes | None, *, where: str) -> str | None:
    """Fill `ref` from its config.json and result.json; the one line of a problem, "unfinished", or
    "" for a dir that is no trial (no config.json and no result.json)."""
    if raw_res is None:
        ref.finished = False
        return "unfinished" if raw_cfg is not None else ""
    try:
        res = _decode(raw_res, _Result, f"{where}/result.json")
        cfg = _decode(raw_cfg, _Config, f"{where}/config.json") if raw_cfg is not None else _Config()
        if cfg.agent is None and cfg.task is None and res.config != msgspec.Raw(b"null"):
            cfg = _decode(bytes(res.config), _Config, f"{where}/result.json")
    except Unsafe as exc:
        return str(exc)
    if not isinstance(res.trial_name, str):
        return f"{where}/result.json: trial_name: missing; not a Harbor TrialResult"
    agent_cfg, info = _dict(cfg.agent), _dict(res.agent_info)
    model_info = _dict(info.get("model_info"))
    # as harbor_trials.read_trial reads them: the run id (importers.from_trial) is made of these
    ref.trial_name = res.trial_name
    ref.trial_id = res.id if isinstance(res.id, str) and res.id else None
    ref.result_sha256 = hashlib.sha256(raw_res).hexdigest() if ref.trial_id is None else ""
    ref.agent = _str(agent_cfg.get("name")) or _str(agent_cfg.get("import_path")) or _str(info.get("name"))
    provider, mname = _str(model_info.get("provider")), _str(model_info.get("name"))
    ref.model = _str(agent_cfg.get("model_name")) or (f"{provider}/{mname}" if provider and mname else mname)
    ref.exception = _str(_dict(res.exception_info).get("exception_type"))
    refs: list[str] = []
    task_id = _dict(res.task_id)
    for value in (res.task_name, task_id.get("name")):
        if isinstance(value, str) and value:
            refs.append(value)
    for task in (task_id, _dict(cfg.task)):
        if isinstance(task.get("path"), str):
            refs.append(task["path"].rstrip("/").rsplit("/", 1)[-1])
        if isinstance(task.get("name"), str):
            refs.append(task["name"])
    ref.task_refs = [t for r in dict.fromkeys(refs) if (t := _str(r))]
    return None


# -- the files of one selected trial ---------------------------------------------------------------


@dataclass
class Fetched:
    fetched: int = 0
    bytes: int = 0
    notes: list[str] = field(default_factory=list)  # one line per file refused


DONE_MARK = ".fetched"


def fetch_trial(tree: Tree, ref: TrialRef, dest: Path) -> Fetched:
    """Copy a selected trial's files from a remote tree into `dest` (a Harbor trial dir the
    importer reads like any other): config.json, result.json, exception.txt, agent/trajectory.json
    (else Terminus-2's agent/episode-N/response.txt), the verifier's top-level files. Each file is
    written under a temporary name and renamed; `dest/.fetched` marks a complete copy (a rerun
    fetches nothing again). FetchFailed when the server gives up: run the import again."""
    out = Fetched()
    if (dest / DONE_MARK).is_file():
        return out
    wanted = ["config.json", "result.json", *TRIAL_FILES]
    for d in TRIAL_DIRS:
        for name, kind in tree.list(f"{ref.rel}/{d}"):
            rel = f"{d}/{name}"
            if kind == "file" and safe_name(name):
                wanted.append(rel)
            elif kind != "dir":
                out.notes.append(
                    f"{tree.where}/{ref.rel}/{rel}: "
                    + (
                        "a symlink or special file; not followed"
                        if kind != "file"
                        else "not a safe file name; refused"
                    )
                )
    if not any(n == "trajectory.json" for n, _ in tree.list(f"{ref.rel}/agent")):
        episodes = sorted(
            (int(m.group(1)), n)
            for n, k in tree.list(f"{ref.rel}/agent")
            if k == "dir" and (m := _EPISODE.match(n))
        )
        wanted += [f"agent/{n}/response.txt" for _, n in episodes[:MAX_EPISODES]]
    total = 0
    for rel in wanted:
        limit = (
            MAX_TRAJECTORY
            if rel == "agent/trajectory.json"
            else MAX_JSON
            if rel.endswith(".json")
            else MAX_FILE
        )
        try:
            data = tree.read(f"{ref.rel}/{rel}", limit)
        except Unsafe as exc:
            out.notes.append(str(exc))
            continue
        if data is None:
            continue
        if total + len(data) > MAX_TRIAL:
            out.notes.append(
                f"{tree.where}/{ref.rel}/{rel}: the trial's files over {MAX_TRIAL >> 20} MiB in all; not kept"
            )
            continue
        total += len(data)
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.part")
        tmp.write_bytes(data)
        os.replace(tmp, target)
        out.fetched += 1
        out.bytes += len(data)
    (dest / DONE_MARK).write_text("\n".join(out.notes) + "\n")
    return out


def episodes_atif(root: Path) -> tuple[dict | None, list[str]]:
    """Terminus-2's own episode logs as an ATIF trajectory, for a trial without
    agent/trajectory.json: each agent/episode-N/response.txt is the model's JSON answer
    (`commands: [{keystrokes, duration}]`, `task_complete`), one agent step each. None when there
    is no episode; notes name the responses that could not be read."""
    notes: list[str] = []
    names = sorted(
        (int(m.group(1)), n) for n, k in list_dir(root, "agent") if k == "dir" and (m := _EPISODE.match(n))
    )
    steps: list[dict] = []
    for number, name in names[:MAX_EPISODES]:
        rel = f"agent/{name}/response.txt"
        try:
            raw = read_bytes(root, rel, MAX_FILE)
        except Unsafe as exc:
            notes.append(str(exc))
            continue
        if raw is None:
            continue
        text = raw.decode("utf-8", "replace")
        start, end = text.find("{"), text.rfind("}")
        try:
            answer = parse_json(text[start : end + 1], root / rel) if 0 <= start < end else None
        except Unsafe as exc:
            notes.append(f"{exc}; episode not replayed")
            answer = None
        if not isinstance(answer, dict):
            steps.append({"step_id": number + 1, "source": "agent", "message": text[:4000]})
            continue
        calls = [
            {
                "tool_call_id": f"call_{number}_{i}",
                "function_name": "bash_command",
                "arguments": {"keystrokes": c["keystrokes"], "duration": c.get("duration", 1.0)},
            }
            for i, c in enumerate(answer.get("commands") or [], 1)
            if isinstance(c, dict) and isinstance(c.get("keystrokes"), str)
        ]
        if answer.get("task_complete") is True:
            calls.append(
                {
                    "tool_call_id": f"call_{number}_task_complete",
                    "function_name": "mark_task_complete",
                    "arguments": {},
                }
            )
        steps.append({"step_id": number + 1, "source": "agent", "message": text[:4000], "tool_calls": calls})
    if not steps:
        return None, notes
    return {"schema_version": "ATIF-v1.4", "agent": {"name": "terminus-2"}, "steps": steps}, notes

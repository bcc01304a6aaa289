"""Everything the harness keeps about an engine's images between runs, listed and pruned
(`swe-residual images list|prune`, swe_residual/cli.py).

Each entry says what it describes and whether that still exists:

* image-meta  meta/<image id>.<probe version>.json - the probed base commit and shipped untracked
              files of a clean image; `gone` once the image is, `outdated` once the probe script
              changed (it is never read again), `unreadable` when it is not a probe's facts
* image       an image the harness built (labelled swe-residual.image.kind) with its tags;
              `untagged` once a rebuild moved its tag elsewhere (nothing can use it)
* build-log   builds/<tag>.log - the log of a build; `gone` once no image has that tag
* snapshot    snapshots/<image id>.json - a machine state's snapshot; `gone` with its image
* snapshot-files, checkpoint   snapshots/<key>/, checkpoints/<key>/ - a staged snapshot's deltas and
              a CRIU checkpoint; `gone` when no kept snapshot refers to them
* criu-probe  criu/<engine>.json - whether an engine can checkpoint (kept; --all removes it)
* reference   <run dir>/reference/<track>--<task>.json - a run's "the verifier works on the
              reference solution's state" (with --run-dir; kept; --all removes it)

`prune` removes the entries whose subject is gone (or every entry with --all: the harness's images
too, children before parents). Locks and the scratch of live processes are never touched.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from swe_residual.backends.docker.engine import ENGINE_ERRORS, IMG_KIND, IMG_TASK, client_for, one_line
from swe_residual.backends.docker.images import probe_version, slug
from swe_residual.backends.safecopy import remove_tree

STALE = ("gone", "outdated", "unreadable", "untagged")
KIND_ORDER = {"machine": 0, "residual": 1, "verifier": 2, "clean": 3}  # children before parents


@dataclass
class CacheEntry:
    kind: str
    describes: str  # what the entry is about (an image, a tag, a task, an engine)
    path: str  # the file or dir; for an image, its id
    age_s: float
    state: str  # ok | gone | outdated | unreadable | untagged | unknown (no engine)
    detail: str = ""
    size: int = 0

    @property
    def stale(self) -> bool:
        return self.state in STALE


def _age(path: Path, now: float) -> float:
    try:
        return max(now - path.stat().st_mtime, 0.0)
    except OSError:
        return 0.0


def _size(path: Path) -> int:
    with contextlib.suppress(OSError):
        if path.is_file():
            return path.stat().st_size
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())
    return 0


def _json(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8")[: 1 << 20])
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _log_name(tag: str) -> str:
    """The build log's file name of a tag (as images.py names it)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", tag) + ".log"


class EngineView:
    """What exists on the engine, asked once (None everywhere when no engine answers)."""

    def __init__(self, base_url: str | None = None, tasks: list[str] = ()):
        self.problem: str | None = None
        self.tasks = set(tasks)
        self.client = None
        self.ids: set[str] | None = None
        self.ours: list[dict] = []
        try:
            self.client = client_for(base_url, 30)
            self.client.ping()
            self.ids = {i["Id"].split(":")[-1] for i in self.client.api.images(all=True)}
            # top-level images only: a build's intermediate layers inherit the labels of its base
            self.ours = [
                i
                for i in self.client.api.images(filters={"label": IMG_KIND})
                if not self.tasks or (i.get("Labels") or {}).get(IMG_TASK) in self.tasks
            ]
        except ENGINE_ERRORS as exc:
            self.problem = one_line(exc)
            self.ids = None

    @property
    def tags(self) -> set[str]:
        return {t for i in self.ours for t in (i.get("RepoTags") or []) if t and t != "<none>:<none>"}

    def exists(self, image_hex: str) -> str:
        if self.ids is None:
            return "unknown"
        return "ok" if image_hex in self.ids else "gone"

    def close(self) -> None:
        if self.client is not None:
            with contextlib.suppress(*ENGINE_ERRORS):
                self.client.close()


def list_entries(cache_dir: Path, engine: EngineView, run_dirs: list[Path] = ()) -> list[CacheEntry]:
    now = time.time()
    out: list[CacheEntry] = []
    version = probe_version()
    for f in sorted((cache_dir / "meta").glob("*.json")) if (cache_dir / "meta").is_dir() else []:
        hexid, _, probe = f.name[: -len(".json")].partition(".")
        meta = _json(f)
        head = meta.get("base_commit") if meta else None
        if meta is not None and engine.tasks and "task" in meta and meta["task"] not in engine.tasks:
            continue  # (an entry that names no task, as older ones, is listed under any --task)
        if meta is None or not isinstance(head, str) or not isinstance(meta.get("baseline"), list):
            state, detail = "unreadable", "not a probe's facts"
        elif probe != version:
            state, detail = "outdated", f"probe version {probe or '?'} (now {version})"
        else:
            state = engine.exists(hexid)
            detail = f"base commit {head[:12] or '-'}, {len(meta['baseline'])} shipped untracked files"
        what = f"image sha256:{hexid[:12]}" + (
            f" ({meta['image']}, task {meta.get('task')})"
            if meta and isinstance(meta.get("image"), str)
            else ""
        )
        out.append(CacheEntry("image-meta", what, str(f), _age(f, now), state, detail, _size(f)))
    for img in engine.ours:
        tags = [t for t in (img.get("RepoTags") or []) if t and t != "<none>:<none>"]
        labels = img.get("Labels") or {}
        out.append(
            CacheEntry(
                "image",
                f"{labels.get(IMG_KIND, '?')} image of task {labels.get(IMG_TASK, '?')}",
                img["Id"],
                max(now - float(img.get("Created") or now), 0.0),
                "ok" if tags else "untagged",
                ", ".join(tags) or "no tag",
                int(img.get("Size") or 0),
            )
        )
    tags = {_log_name(t) for t in engine.tags}
    for f in sorted((cache_dir / "builds").glob("*.log")) if (cache_dir / "builds").is_dir() else []:
        if engine.tasks and not any(f"-{slug(t)}_" in f.name for t in engine.tasks):
            continue
        state = "unknown" if engine.ids is None else ("ok" if f.name in tags else "gone")
        out.append(
            CacheEntry("build-log", f"build of {f.name[:-4]}", str(f), _age(f, now), state, "", _size(f))
        )
    referenced: set[Path] = set()
    snaps = cache_dir / "snapshots"
    for f in sorted(snaps.glob("*.json")) if snaps.is_dir() else []:
        meta = _json(f)
        state = "unreadable" if meta is None else engine.exists(f.name[: -len(".json")])
        if meta is not None and state != "gone":
            for d in [
                *(s.get("delta") for s in meta.get("stages") or [] if isinstance(s, dict)),
                meta.get("final_delta"),
                (meta.get("criu") or {}).get("dir"),
            ]:
                if isinstance(d, str) and d:
                    referenced.add(Path(d) if Path(d).is_dir() else Path(d).parent)
        what = (
            f"machine state {meta.get('state', '?')} of task {meta.get('task', '?')}" if meta else "snapshot"
        )
        out.append(
            CacheEntry("snapshot", what, str(f), _age(f, now), state, f"image sha256:{f.name[:12]}", _size(f))
        )
    for kind, parent in (("snapshot-files", snaps), ("checkpoint", cache_dir / "checkpoints")):
        for d in sorted(p for p in parent.iterdir() if p.is_dir()) if parent.is_dir() else []:
            state = "unknown" if engine.ids is None else ("ok" if d in referenced else "gone")
            out.append(
                CacheEntry(kind, f"pieces of snapshot {d.name}", str(d), _age(d, now), state, "", _size(d))
            )
    for f in sorted((cache_dir / "criu").glob("*.json")) if (cache_dir / "criu").is_dir() else []:
        meta = _json(f) or {}
        out.append(
            CacheEntry(
                "criu-probe",
                f"CRIU probe of engine {f.name[:-5]}",
                str(f),
                _age(f, now),
                "ok",
                str(meta.get("reason") or "")[:80],
                _size(f),
            )
        )
    for run in run_dirs:
        ref = Path(run) / "reference"
        for f in sorted(ref.glob("*.json")) if ref.is_dir() else []:
            meta = _json(f)
            track, _, task = f.name[:-5].partition("--")
            out.append(
                CacheEntry(
                    "reference",
                    f"reference check of {track}/{task}",
                    str(f),
                    _age(f, now),
                    "ok" if meta is not None else "unreadable",
                    str((meta or {}).get("detail") or "")[:80],
                    _size(f),
                )
            )
    return out


def prune(
    entries: list[CacheEntry], engine: EngineView, *, everything: bool = False, dry_run: bool = False
) -> tuple[list[CacheEntry], list[tuple[CacheEntry, str]]]:
    """Remove stale entries (every entry with `everything`); (removed, [(entry, why not)])."""
    doomed = [e for e in entries if everything or e.stale]
    if any(e.kind == "image" for e in doomed) and engine.client is None:
        return [], [(e, f"no engine answers: {engine.problem}") for e in doomed if e.kind == "image"]
    doomed.sort(key=lambda e: (e.kind == "image", KIND_ORDER.get(e.describes.split(" ", 1)[0], 9)))
    removed: list[CacheEntry] = []
    failed: list[tuple[CacheEntry, str]] = []
    for e in doomed:
        if dry_run:
            removed.append(e)
            continue
        try:
            if e.kind == "image":
                tags = [t for t in e.detail.split(", ") if t and t != "no tag"]
                for ref in tags or [e.path]:  # untag each name; the last one removes the image
                    engine.client.api.remove_image(ref)
            else:
                remove_tree(e.path)
                if Path(e.path).exists():
                    raise OSError("still there")
            removed.append(e)
        except (*ENGINE_ERRORS, OSError) as exc:
            failed.append((e, one_line(getattr(exc, "explanation", None) or exc)))
    return removed, failed


def as_json(entries: list[CacheEntry]) -> list[dict]:
    return [{**asdict(e), "stale": e.stale} for e in entries]


def age_text(seconds: float) -> str:
    for unit, n in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= n:
            return f"{seconds / n:.0f}{unit}"
    return f"{seconds:.0f}s"

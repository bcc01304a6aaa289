"""The packs `swe-residual states fetch` installed in the cache (`states list`), and what the user
should know about the tasks a pack's states were checked against."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swe_residual.packs.pack import INFO_FILE
from swe_residual.packs.verify import checksum_problem
from swe_residual.safe_read import Unsafe, parse_json, read_bytes
from swe_residual.tracks import PACK_SOURCE, SUITES_ROOT, cache_root, clone_dir, read_source


@dataclass
class Installed:
    track: str
    path: Path
    source: dict[str, Any]
    info: dict[str, Any]
    n_states: int
    digest: str
    problem: str | None = None  # why the installed copy no longer checks out (None: checksums ok)
    notes: list[str] = field(default_factory=list)


def installed_packs() -> list[Installed]:
    """Every pack `states fetch` installed in the cache, each with its checksums checked again."""
    root = cache_root() / "states"
    out: list[Installed] = []
    if not root.is_dir():
        return out
    for d in sorted(root.iterdir()):
        if d.name.startswith(".") or d.is_symlink() or not d.is_dir():
            continue
        try:
            src = parse_json(read_bytes(d, PACK_SOURCE, 1 << 20) or b"null", d / PACK_SOURCE)
            info = parse_json(read_bytes(d, INFO_FILE, 1 << 20) or b"null", d / INFO_FILE)
        except Unsafe as exc:
            out.append(Installed(d.name, d, {}, {}, 0, "", problem=str(exc)))
            continue
        src, info = (src if isinstance(src, dict) else {}), (info if isinstance(info, dict) else {})
        problem = None if src else f"no {PACK_SOURCE} (an install that did not complete)"
        problem = problem or checksum_problem(d)
        n = src.get("n_states") if isinstance(src.get("n_states"), int) else 0
        out.append(
            Installed(
                d.name,
                d,
                src,
                info,
                n,
                str(src.get("digest", "")),
                problem=problem,
                notes=tasks_notes(d.name, info) if (SUITES_ROOT / d.name).is_dir() else [],
            )
        )
    return out


def tasks_notes(track: str, info: dict[str, Any]) -> list[str]:
    """What the user should know about the tasks these states were checked against."""
    tasks = info.get("tasks") if isinstance(info.get("tasks"), dict) else {}
    # a commit of the track's task repository (from a `tasks fetch` record) is one `--ref` can pin
    want = tasks.get("commit") if tasks.get("from") == "tasks fetch record" else None
    if (SUITES_ROOT / track / "tasks").is_dir():
        return []
    have = read_source(clone_dir(track))
    if have is None:
        return [
            f"the tasks of track {track!r} are not fetched yet: `swe-residual tasks fetch {track}`"
            + (f" (the states were checked against commit {want}: add --ref {want})" if want else "")
        ]
    if want and have.get("commit") != want:
        return [
            f"the states were checked against task commit {want}; your fetched tasks are at "
            f"{have.get('commit')} (`swe-residual tasks fetch {track} --ref {want}` pins them)"
        ]
    return []

"""The checks of a states pack: its format, the checksum of every file (no file missing from or
added to the list) and its states file."""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from swe_residual.errors import InputError
from swe_residual.packs.pack import CHECKSUMS, FORMAT, INFO_FILE, STATES_FILE
from swe_residual.safe_read import Unsafe, parse_json, read_bytes
from swe_residual.states import load_states, sha256_file
from swe_residual.tracks import PACK_SOURCE

_CHECKSUM_LINE = re.compile(r"([0-9a-f]{64})  (.+)")


def verify_pack(root: Path, *, label: str) -> tuple[dict[str, Any], int]:
    """(pack.json, number of states) of the pack at `root`, after every check: its format, the
    checksum of every file (and no file missing from or added to the list), the states file (no
    YAML aliases; schema, ids and artifacts as load_states checks them; one track)."""
    info = _read_info(root, label)
    problem = checksum_problem(root)
    if problem:
        raise InputError(f"states fetch: {label}: {problem}; nothing installed")
    text = (root / STATES_FILE).read_text(encoding="utf-8", errors="replace")
    try:
        if any(isinstance(ev, yaml.AliasEvent) for ev in yaml.parse(text, Loader=yaml.SafeLoader)):
            raise InputError(
                f"states fetch: {label}: {STATES_FILE} uses YAML aliases (a states pack never does); "
                "nothing installed"
            )
    except yaml.YAMLError:
        pass  # load_states names the line
    try:
        states = load_states(root / STATES_FILE, None)
    except InputError as exc:
        raise InputError(f"states fetch: {label}: {exc}; nothing installed") from None
    others = sorted({s.track for s in states} - {info["track"]})
    if others:
        raise InputError(
            f"states fetch: {label}: {STATES_FILE} holds states of track {others[0]!r}, but "
            f"{INFO_FILE} says the pack is of track {info['track']!r}; nothing installed"
        )
    if not states:
        raise InputError(f"states fetch: {label}: {STATES_FILE} lists no states; nothing installed")
    return info, len(states)


def _read_info(root: Path, label: str) -> dict[str, Any]:
    try:
        data = read_bytes(root, INFO_FILE, 1 << 20)
        info = parse_json(data, INFO_FILE) if data is not None else None
    except Unsafe as exc:
        raise InputError(f"states fetch: {label}: {exc}; nothing installed") from None
    if not isinstance(info, dict) or info.get("format") != FORMAT:
        raise InputError(
            f"states fetch: {label}: {INFO_FILE}: format is not {FORMAT!r} (not a states pack of "
            "this version); nothing installed"
        )
    track = info.get("track")
    if not isinstance(track, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", track):
        raise InputError(
            f"states fetch: {label}: {INFO_FILE}: track: {track!r} is no track name; nothing installed"
        )
    return info


def checksum_problem(root: Path) -> str | None:
    """None when checksums.sha256 lists exactly the pack's files (the source record aside) with
    their sha256; else the first problem, naming the file."""
    try:
        data = read_bytes(root, CHECKSUMS, 16 << 20)
    except Unsafe as exc:
        return str(exc)
    if data is None:
        return f"no {CHECKSUMS}"
    listed: dict[str, str] = {}
    for n, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
        m = _CHECKSUM_LINE.fullmatch(line)
        rel = m.group(2) if m else ""
        if not m or rel.startswith("/") or ".." in PurePosixPath(rel).parts or rel in listed:
            return f"{CHECKSUMS}:{n}: not '<sha256>  <relative path>' of a file listed once"
        listed[rel] = m.group(1)
    present = set()
    for p in root.rglob("*"):
        rel = str(p.relative_to(root))
        if p.is_symlink() or (not p.is_file() and not p.is_dir()):
            return f"{rel}: not a regular file"
        if p.is_file() and rel not in (CHECKSUMS, PACK_SOURCE):
            present.add(rel)
    for rel in sorted(present - set(listed)):
        return f"{rel}: not listed in {CHECKSUMS}"
    for rel in sorted(set(listed) - present):
        return f"{CHECKSUMS} lists {rel}, which is not in the pack"
    for rel in sorted(listed):
        actual = sha256_file(root / rel)
        if actual != listed[rel]:
            return f"{rel}: sha256 {actual} does not match {CHECKSUMS} ({listed[rel]}): the file was changed"
    return None

"""Run bundles: `swe-residual run pack RUN --out FILE.tar.gz` writes a run dir as one relocatable
file, and `report`, `compare`, `gate` and `regrade` read such a file wherever a run dir is accepted.

A bundle holds what the numbers come from (results.jsonl, manifest.json, provenance.json,
run-info.json, states/, cases/): artifact paths in records are relative already; the pages and
tables a run writes (report.html, pages/, summary.json, tables.md, results.csv, compare.html) are
left out, since `report` makes them again. Text files the harness wrote have this machine's paths
replaced (the run dir by `<run>`, the harness's checkout by `<harness>`, the Python environment by
`<python>`, the home dir by `~`); patches are kept byte for byte (they are what is graded).

A bundle comes from elsewhere: it is extracted as a stream into a new temporary dir, regular files
and dirs only, no absolute name, no `..`, no link or device, within member, size and count caps;
anything else stops it with one line naming the member.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sys
import tarfile
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from swe_residual.errors import InputError

SUFFIXES = (".tar.gz", ".tgz")
#: what `report` writes again from the records: not bundled
DERIVED = {"report.html", "pages", "summary.json", "tables.md", "results.csv", "compare.html"}
KEPT_AS_IS = (".patch",)
RUN_INFO = (
    "run-info.json"  # the run page's environment (report/html/run_page.py)  # graded bytes: never rewritten
)
TEXT_LIMIT = 64 << 20  # text files above this are bundled as they are


@dataclass(frozen=True)
class Limits:
    """What an extracted bundle may hold (a 100k-case run is a few GiB in a few 100k files)."""

    max_member_bytes: int = 256 << 20
    max_total_bytes: int = 8 << 30
    max_members: int = 2_000_000
    max_depth: int = 12


LIMITS = Limits()


def is_bundle(path: str | Path) -> bool:
    return str(path).endswith(SUFFIXES) and Path(path).is_file()


# -- packing -------------------------------------------------------------------------------------


def local_paths(run_dir: Path) -> list[tuple[str, str]]:
    """(this machine's path, its placeholder), longest first: what a bundle must not hold."""
    root = Path(__file__).resolve().parent.parent.parent
    pairs: dict[str, str] = {}
    for path, placeholder in (
        (Path.home(), "~"),
        (Path.cwd(), "<cwd>"),
        (run_dir.absolute().parent, "<run>/.."),
        (run_dir.resolve().parent, "<run>/.."),
        (Path(sys.prefix), "<python>"),
        (Path(sys.executable).resolve().parent.parent, "<python>"),
        (root, "<harness>"),
        (run_dir.absolute(), "<run>"),
        (run_dir.resolve(), "<run>"),
    ):
        pairs[str(path)] = placeholder  # a later, more specific name wins for the same path
    return sorted(((p, r) for p, r in pairs.items() if len(p) > 1), key=lambda pr: -len(pr[0]))


#: an absolute path in text: after a separator, up to the next separator
_ABSOLUTE = re.compile(r"(?<![\w.~<>-])/[^\s\"'=:,;()\[\]{}]+")


def _scrubbed(data: bytes, paths: list[tuple[str, str]], every_local: bool = False) -> bytes:
    """data with the paths replaced where they stand whole (not /run in /run-agents.yaml); with
    `every_local`, also every other absolute path that exists on this machine (by `<local>/NAME`)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return data
    for path, placeholder in paths:
        text = re.sub(
            re.escape(path) + r"(?=[/\s\"'=:,;()\[\]{}]|$)", placeholder.replace("\\", "\\\\"), text
        )
    if every_local:
        text = _ABSOLUTE.sub(lambda m: f"<local>/{Path(m[0]).name}" if _exists(m[0]) else m[0], text)
    return text.encode("utf-8")


def _exists(path: str) -> bool:
    try:
        return len(path) > 1 and os.path.lexists(path) and not path.startswith(("/proc", "/sys", "/dev"))
    except (OSError, ValueError):
        return False


def pack_run(run_dir: Path, out: Path) -> tuple[int, int]:
    """Write the bundle of run_dir to out (a .tar.gz); (files, bytes) written."""
    run_dir = Path(run_dir)
    if not (run_dir / "results.jsonl").is_file():
        raise InputError(f"{run_dir}: no results.jsonl (not a run dir)")
    if not str(out).endswith(SUFFIXES):
        raise InputError(f"--out {out}: a bundle is a .tar.gz file (e.g. --out {out}.tar.gz)")
    paths = local_paths(run_dir)
    top = run_dir.resolve().name
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    files = total = 0
    with tarfile.open(tmp, "w:gz", format=tarfile.PAX_FORMAT) as tar:
        tar.addfile(_dir_info(top))
        for dirpath, dirnames, filenames in os.walk(run_dir):
            base = Path(dirpath)
            rel_dir = base.relative_to(run_dir)
            if rel_dir == Path("."):
                dirnames[:] = sorted(d for d in dirnames if d not in DERIVED)
                filenames = [f for f in filenames if f not in DERIVED and not f.endswith(".tmp")]
            else:
                dirnames.sort()
                tar.addfile(_dir_info(f"{top}/{rel_dir.as_posix()}"))
            for name in sorted(filenames):
                p = base / name
                if p.is_symlink() or not p.is_file():
                    continue  # a run dir holds files the harness wrote; anything else stays behind
                data = p.read_bytes() if p.stat().st_size <= TEXT_LIMIT else None
                if data is not None and not name.endswith(KEPT_AS_IS):
                    # run-info.json is the harness's account of this machine: every local path goes
                    data = _scrubbed(data, paths, every_local=rel_dir == Path(".") and name == RUN_INFO)
                info = tarfile.TarInfo(f"{top}/{(rel_dir / name).as_posix()}")
                info.mode, info.mtime = 0o644, int(p.stat().st_mtime)
                if data is None:
                    info.size = p.stat().st_size
                    with open(p, "rb") as fh:
                        tar.addfile(info, fh)
                else:
                    info.size = len(data)
                    import io

                    tar.addfile(info, io.BytesIO(data))
                files += 1
                total += info.size
    tmp.replace(out)
    return files, total


def _dir_info(name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode = tarfile.DIRTYPE, 0o755
    return info


# -- reading -------------------------------------------------------------------------------------


def _refuse(bundle: Path, name: str, why: str) -> InputError:
    return InputError(
        f"{bundle}: member {name[:200]!r}: {why}; not read (a run bundle holds files and dirs only)"
    )


def extract(bundle: Path, dest: Path, limits: Limits = LIMITS) -> Path:
    """Extract the bundle into the new dir dest (see the module's rules); the run dir inside it."""
    members = total = 0
    tops: set[str] = set()
    try:
        with tarfile.open(bundle, "r|gz") as tar:
            for m in tar:
                members += 1
                if members > limits.max_members:
                    raise _refuse(bundle, m.name, f"more than {limits.max_members} members")
                parts = PurePosixPath(m.name).parts
                if (
                    not parts
                    or m.name.startswith("/")
                    or any(p in ("..", "") for p in parts)
                    or "\0" in m.name
                ):
                    raise _refuse(bundle, m.name, "an absolute name or one that climbs out with '..'")
                if len(parts) > limits.max_depth:
                    raise _refuse(bundle, m.name, f"deeper than {limits.max_depth} levels")
                parts = tuple(p for p in parts if p != ".")
                if not parts:
                    continue
                target = dest.joinpath(*parts)
                tops.add(parts[0])
                if m.isdir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                if not m.isreg():
                    raise _refuse(bundle, m.name, "a link, device or fifo")
                if m.size > limits.max_member_bytes:
                    raise _refuse(
                        bundle,
                        m.name,
                        f"{m.size} bytes, over the {limits.max_member_bytes} a member may have",
                    )
                total += m.size
                if total > limits.max_total_bytes:
                    raise _refuse(bundle, m.name, f"the bundle grows past {limits.max_total_bytes} bytes")
                target.parent.mkdir(parents=True, exist_ok=True)
                src = tar.extractfile(m)
                assert src is not None
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
                with os.fdopen(fd, "wb") as fh:
                    shutil.copyfileobj(src, fh, 1 << 20)
    except (tarfile.TarError, OSError, EOFError) as exc:
        if isinstance(exc, FileExistsError):
            raise InputError(f"{bundle}: a member is there twice ({exc.filename}); not read") from None
        raise InputError(
            f"{bundle}: not a readable .tar.gz run bundle ({type(exc).__name__}: {exc})"
        ) from None
    if len(tops) != 1 or not (dest / next(iter(tops)) / "results.jsonl").is_file():
        raise InputError(
            f"{bundle}: no run dir in it (one top dir holding results.jsonl; `swe-residual run pack` writes one)"
        )
    return dest / next(iter(tops))


@contextlib.contextmanager
def opened(paths: Sequence[str | Path]) -> Iterator[list[str]]:
    """The run dirs of `paths`: a dir as it is, a bundle extracted into a temporary dir (removed
    afterwards)."""
    with contextlib.ExitStack() as stack:
        out: list[str] = []
        for p in paths:
            if is_bundle(p):
                tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="swe-residual-bundle-")))
                out.append(str(extract(Path(p), tmp)))
            else:
                out.append(str(p))
        yield out

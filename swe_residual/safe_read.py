"""Reading files someone else produced (imported runs, trial dirs) without trusting them.

Every path is opened component by component below a root the user named, with O_NOFOLLOW, so
a symlink anywhere inside (file or directory) is never followed; only regular files are read
(no fifos or devices), and never more than a bound. What cannot be read safely raises Unsafe
with a short reason; a missing file is simply None.

Text that came from someone else is made valid before it is written anywhere (valid_text,
valid_json): a lone surrogate (a file name's byte that is not UTF-8, a "\\ud800" escape in JSON)
would make the line or file we write unreadable, so it is escaped as text.
"""

from __future__ import annotations

import contextlib
import errno
import http.client
import json
import math
import os
import re
import stat
import time
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

from swe_residual.errors import InputError

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


#: JSON read from someone else nests at most this deep (a parse or walk deeper would hit Python's
#: recursion limit; real trajectories and results nest < 20)
MAX_JSON_DEPTH = 200

_SURROGATE = re.compile("[\ud800-\udfff]")
# a surrogate in a JSON text: an escape (\ud800) or the UTF-8 bytes json.loads decodes with surrogatepass
_SURROGATE_IN_JSON = re.compile(rb"\\u[dD][89a-fA-F]|\xed[\xa0-\xbf]")


def _escape(m: re.Match) -> str:
    c = ord(m.group())
    return f"\\x{c - 0xDC00:02x}" if 0xDC80 <= c <= 0xDCFF else f"\\u{c:04x}"


def valid_text(text: str, limit: int | None = None) -> str:
    """`text` as valid Unicode: a byte that was not UTF-8 (surrogateescape'd, as os.fsdecode gives
    file names) becomes `\\xNN`, any other lone surrogate `\\uNNNN`; over `limit` characters, the
    head and a note of how many were cut."""
    if not text.isascii():
        text = _SURROGATE.sub(_escape, text)
    if limit is not None and len(text) > limit:
        text = text[:limit] + f"... [{len(text) - limit} characters cut]"
    return text


#: the largest integer a written line holds: a count beyond it (an agent's trajectory may claim
#: any token count) is written as this bound, so every reader (msgspec's int64, numpy) takes it
MAX_INT = 2**63 - 1
_CUT = "[nested more than {} levels deep: cut]"


def valid_json(value: Any, limit: int | None = None, depth: int = 0) -> Any:
    """A copy of a JSON-like value (dicts, lists, tuples, scalars) that JSON can hold and every
    reader takes back: strings, keys included (as strings), are valid_text(s, limit), a float that is not finite
    (inf, nan) is None, an integer beyond +-MAX_INT is clamped to it, and a container nested more
    than MAX_JSON_DEPTH levels is replaced by a note; for the fields of a record or a stage line."""
    if isinstance(value, str):
        return valid_text(value, limit)
    if isinstance(value, (dict, list, tuple)) and depth >= MAX_JSON_DEPTH:
        return _CUT.format(MAX_JSON_DEPTH)
    if isinstance(value, dict):
        return {_key(k, limit): valid_json(v, limit, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [valid_json(v, limit, depth + 1) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, int) and not isinstance(value, bool) and not -MAX_INT <= value <= MAX_INT:
        return MAX_INT if value > 0 else -MAX_INT
    return value


def _key(key: Any, limit: int | None) -> str:
    """A dict key as the string JSON writes (any key type: sorted output compares them)."""
    if isinstance(key, int) and not isinstance(key, bool):
        key = valid_json(key)
    return valid_text(key if isinstance(key, str) else str(key), limit)


def parse_json(
    raw: bytes | str, where: object, *, position: bool = True, keep: tuple[str, frozenset[str]] | None = None
) -> Any:
    """JSON from someone else: at most MAX_JSON_DEPTH deep and every string valid (valid_text, in
    place); Unsafe naming `where` (and the line and column, with `position`) when it is not JSON,
    nests too deep or holds an integer of more than 4,300 digits. `keep` (key, keys): every object
    that has `key` keeps only `keys` as it is parsed (the records of a large document: what a
    reader uses of them)."""
    where = valid_text(str(where))
    try:
        data = json.loads(raw) if keep is None else json.loads(raw, object_pairs_hook=_keeping(*keep))
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, an integer too long to read
        pos = (
            f" (line {exc.lineno} column {exc.colno})"
            if position and isinstance(exc, json.JSONDecodeError)
            else ""
        )
        raise Unsafe(f"{where}: invalid JSON{pos}: {str(getattr(exc, 'msg', exc))[:200]}") from None
    except RecursionError:
        raise Unsafe(f"{where}: invalid JSON: nested more than {MAX_JSON_DEPTH} levels deep") from None
    if not isinstance(data, (dict, list)):
        return valid_text(data) if isinstance(data, str) else data
    raw_bytes = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    repair = (b"\\u" in raw_bytes or b"\xed" in raw_bytes) and _SURROGATE_IN_JSON.search(
        raw_bytes
    ) is not None
    _walk(data, where, repair)
    return data


def _keeping(key: str, keys: frozenset[str]):
    def hook(pairs: list[tuple[str, Any]]) -> dict:
        whole = dict(pairs)
        return {k: v for k, v in whole.items() if k in keys} if key in whole else whole

    return hook


def _walk(data: dict | list, where: object, repair: bool) -> None:
    """Check the depth of parsed JSON without recursion; with `repair`, make its strings valid."""
    stack: list[tuple[dict | list, int]] = [(data, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            raise Unsafe(f"{where}: invalid JSON: nested more than {MAX_JSON_DEPTH} levels deep")
        if isinstance(node, dict):
            if repair and any(isinstance(k, str) and not k.isascii() and _SURROGATE.search(k) for k in node):
                items = [(valid_text(k), v) for k, v in node.items()]
                node.clear()
                node.update(items)
            for k, v in node.items():
                if isinstance(v, (dict, list)):
                    stack.append((v, depth + 1))
                elif repair and isinstance(v, str):
                    node[k] = valid_text(v)
        else:
            for i, v in enumerate(node):
                if isinstance(v, (dict, list)):
                    stack.append((v, depth + 1))
                elif repair and isinstance(v, str):
                    node[i] = valid_text(v)


class Unsafe(Exception):
    """A file that is there but is not read: a symlink, not a regular file, over its bound,
    or not the JSON it should be. str() is the one-line reason, naming the path."""


def _parts(rel: str) -> tuple[str, ...]:
    parts = PurePosixPath(rel).parts
    if not parts or parts[0] == "/" or any(p in ("..", ".", "") for p in parts):
        raise ValueError(f"not a relative path inside the root: {rel!r}")
    return parts


def _open(root: Path, rel: str, flags: int) -> int | None:
    """An fd for root/rel opened without following any symlink below root; None if missing."""
    parts = _parts(rel)
    try:
        dfd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            try:
                fd = os.open(part, flags if last else _DIR, dir_fd=dfd)
            except FileNotFoundError:
                return None
            except OSError as exc:
                where = root / Path(*parts[: i + 1])
                if exc.errno in (errno.ELOOP, errno.EMLINK) or _is_link(part, dfd):
                    raise Unsafe(f"{where}: a symlink; not followed") from None
                if exc.errno == errno.ENOTDIR:
                    raise Unsafe(f"{where}: not a directory") from None
                raise Unsafe(f"{where}: cannot be opened: {exc.strerror}") from None
            os.close(dfd)
            dfd = fd
        fd, dfd = dfd, -1
        return fd
    finally:
        if dfd >= 0:
            os.close(dfd)


def _is_link(name: str, dfd: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dfd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def read_bytes(root: Path, rel: str, limit: int) -> bytes | None:
    """The bytes of root/rel (a regular file of at most `limit` bytes), None if it is missing."""
    fd = _open(Path(root), rel, _FILE)
    if fd is None:
        return None
    path = Path(root) / rel
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Unsafe(f"{path}: not a regular file; not read")
        if st.st_size > limit:
            raise Unsafe(f"{path}: {st.st_size} bytes, over the {_size(limit)} bound; not read")
        chunks, total = [], 0
        while total <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > limit:  # it grew while being read
            raise Unsafe(f"{path}: over the {_size(limit)} bound; not read")
        return b"".join(chunks)
    finally:
        os.close(fd)


def open_dir(root: Path, rel: str) -> int | None:
    """An fd of the real directory root/rel (no symlink below root followed), None if missing;
    Unsafe if a component is a symlink or not a directory. Close it with os.close."""
    return _open(Path(root), rel, _DIR) if rel else os.open(root, _DIR)


def open_subdir(dfd: int, name: str) -> int | None:
    """An fd of the directory `name` inside the open dir `dfd` (never a symlink), None if missing
    or not a real directory."""
    try:
        return os.open(name, _DIR, dir_fd=dfd)
    except OSError:
        return None


def read_at(dfd: int, name: str, limit: int, where: object) -> bytes | None:
    """read_bytes for the file `name` of the open dir `dfd` (one directory, many files: one open
    of the dir); `where` names it in the Unsafe message."""
    try:
        fd = os.open(name, _FILE, dir_fd=dfd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EMLINK) or _is_link(name, dfd):
            raise Unsafe(f"{where}: a symlink; not followed") from None
        raise Unsafe(f"{where}: cannot be opened: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Unsafe(f"{where}: not a regular file; not read")
        if st.st_size > limit:
            raise Unsafe(f"{where}: {st.st_size} bytes, over the {_size(limit)} bound; not read")
        chunks, total = [], 0
        while total <= limit:
            chunk = os.read(fd, min(max(st.st_size - total, 0) + 1, 1 << 20, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total == st.st_size:  # all its stat said: no second read for a small file
                break
        if total > limit:  # it grew while being read
            raise Unsafe(f"{where}: over the {_size(limit)} bound; not read")
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_json(root: Path, rel: str, limit: int) -> Any:
    """The parsed JSON of root/rel (parse_json: depth-limited, strings made valid), None if it is
    missing; Unsafe if it is not JSON or nests too deep."""
    data = read_bytes(root, rel, limit)
    if data is None:
        return None
    return parse_json(data, Path(root) / rel)


def is_dir(root: Path, rel: str) -> bool:
    """root/rel is a real directory (not a symlink to one)."""
    try:
        fd = _open(Path(root), rel, _DIR)
    except Unsafe:
        return False
    if fd is None:
        return False
    os.close(fd)
    return True


def list_dir(root: Path, rel: str = "") -> list[tuple[str, str]]:
    """(name, kind) of the entries of a real directory below root, kind in file/dir/symlink/other;
    sorted by name; [] when it is missing or not a real directory."""
    if rel:
        try:
            fd = _open(Path(root), rel, _DIR)
        except Unsafe:
            return []
        if fd is None:
            return []
    else:
        try:
            fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            return []
    out = []
    try:
        with os.scandir(fd) as it:
            for e in it:
                kind = (
                    "symlink"
                    if e.is_symlink()
                    else "dir"
                    if e.is_dir(follow_symlinks=False)
                    else "file"
                    if e.is_file(follow_symlinks=False)
                    else "other"
                )
                out.append((e.name, kind))
    finally:
        os.close(fd)
    return sorted(out)


def walk_files(root: Path, *, max_depth: int = 8, max_entries: int = 200_000) -> Iterator[str]:
    """Relative paths of the regular files below root, depth-first in name order, never entering
    a symlinked directory; stops after max_entries entries."""
    seen = 0
    stack = [""]
    while stack:
        rel = stack.pop()
        entries = list_dir(root, rel)
        subdirs = []
        for name, kind in entries:
            seen += 1
            if seen > max_entries:
                return
            child = f"{rel}/{name}" if rel else name
            if kind == "file":
                yield child
            elif kind == "dir" and child.count("/") < max_depth:
                subdirs.append(child)
        stack.extend(reversed(subdirs))


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n} bytes"


def read_yaml(path, what: str):
    """Parse a YAML input file; a missing file or bad syntax is a one-line InputError."""
    import yaml

    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: {what} does not exist")
    try:
        # libyaml's loader when PyYAML has it (its wheels do): 5-10x faster on a states file of
        # thousands of entries; the same safe constructors
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        return yaml.load(path.read_text(encoding="utf-8"), Loader=loader) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise InputError(f"{path}:{where} invalid YAML: {getattr(exc, 'problem', exc)}") from None


# -- downloads --------------------------------------------------------------------------------

DOWNLOAD_DEADLINE_S = 600.0


def download_deadline() -> float:
    """Seconds one download may take in all, headers to last byte: $SWE_RESIDUAL_DOWNLOAD_DEADLINE,
    else DOWNLOAD_DEADLINE_S. A per-read timeout alone lets a server that sends a byte every few
    seconds hold a fetch for ever."""
    raw = os.environ.get("SWE_RESIDUAL_DOWNLOAD_DEADLINE", "")
    try:
        value = float(raw) if raw else DOWNLOAD_DEADLINE_S
    except ValueError:
        raise InputError(
            f"SWE_RESIDUAL_DOWNLOAD_DEADLINE={raw[:40]!r}: not a number of seconds; unset it or give one"
        ) from None
    return value if value > 0 and math.isfinite(value) else DOWNLOAD_DEADLINE_S


#: for git over http(s): a transfer slower than 1,000 bytes/s for 60 s is given up (git's own
#: check), so a trickling server ends a clone long before its overall timeout
GIT_LOW_SPEED = {"GIT_HTTP_LOW_SPEED_LIMIT": "1000", "GIT_HTTP_LOW_SPEED_TIME": "60"}


class DeadlinePassed(Exception):
    """A download did not end by its deadline."""


@contextlib.contextmanager
def open_within(request: Any, deadline: float, timeout: float) -> Iterator[Any]:
    """urllib's response to `request` (proxies and redirects as urllib does them), cut off at
    `deadline` (time.monotonic()) wherever it waits: a connect waits at most until then, and a
    watchdog shuts down every connection it made at the deadline, so a server that trickles its
    status line or headers is cut off too (the body: read it with body_chunks). DeadlinePassed when
    the deadline ended it; `timeout` bounds each read before that."""
    import threading
    import urllib.request

    made: list[http.client.HTTPConnection] = []
    lock = threading.Lock()
    passed = threading.Event()

    def factory(cls: type[http.client.HTTPConnection]) -> Any:
        def connection(host: str, **kw: Any) -> http.client.HTTPConnection:
            left = deadline - time.monotonic()
            if left <= 0:
                raise DeadlinePassed()
            conn = cls(host, **{**kw, "timeout": min(timeout, left)})
            with lock:
                made.append(conn)
            return conn

        return connection

    class Http(urllib.request.HTTPHandler):
        def http_open(self, req: Any) -> Any:
            return self.do_open(factory(http.client.HTTPConnection), req)

    class Https(urllib.request.HTTPSHandler):
        def https_open(self, req: Any) -> Any:
            return self.do_open(factory(http.client.HTTPSConnection), req, context=self._context)  # type: ignore[attr-defined]

    def cut() -> None:
        passed.set()
        with lock:
            for conn in made:
                if conn.sock is not None:
                    with contextlib.suppress(OSError):
                        conn.sock.shutdown(2)  # socket.SHUT_RDWR: a read blocked on it returns

    watchdog = threading.Timer(max(0.0, deadline - time.monotonic()), cut)
    watchdog.daemon = True
    watchdog.start()
    try:
        try:
            resp = urllib.request.build_opener(Http, Https).open(request, timeout=timeout)
        except Exception:
            if passed.is_set() or time.monotonic() >= deadline:
                raise DeadlinePassed() from None
            raise
        with resp:
            try:
                yield resp
            except Exception:
                if passed.is_set():
                    raise DeadlinePassed() from None
                raise
    finally:
        watchdog.cancel()


def body_chunks(resp: Any, deadline: float, size: int = 1 << 20) -> Iterator[bytes]:
    """The body of an http.client response as it arrives, until `deadline` (time.monotonic()):
    each read waits at most until the deadline, so a trickling server is cut off there
    (DeadlinePassed) instead of at the end of its body; a body cut short raises IncompleteRead."""
    sock = getattr(getattr(getattr(resp, "fp", None), "raw", None), "_sock", None)
    per_read = sock.gettimeout() if sock is not None else None
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise DeadlinePassed()
            if sock is not None:
                sock.settimeout(min(left, per_read) if per_read else left)
            try:
                data = resp.read1(size)
            except TimeoutError:
                if time.monotonic() >= deadline - 0.01:
                    raise DeadlinePassed() from None
                raise
            if not data:
                if getattr(resp, "length", None):  # the server closed before its Content-Length
                    raise http.client.IncompleteRead(b"", resp.length)
                resp.read()  # the end of the body: the response is closed, its connection reusable
                return
            yield data
            if getattr(resp, "length", None) == 0:
                resp.read()
                return
    finally:
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.settimeout(per_read)

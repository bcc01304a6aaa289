"""DeepSWE's public leaderboard release: its manifest, its index of trials, and each trial's files.

The release (docs/residualization.md, "DeepSWE's public leaderboard release") is a manifest

    release.json  {"release_id", "artifact_base_url", "artifact_key_prefix", "artifact_patterns":
                   {"trajectory", "model_patch", "agent_log", "verifier_output", "verifier_file"}}

beside an index `trials.json` (`{"rows": [...]}` or a bare list, one row per graded rollout) and,
per trial, files on a CDN at `artifact_base_url + "/" + pattern` with `{trial_name}` and `{file}`
replaced. A local mirror holds the same files either in that CDN layout (`<dir>/<pattern>`) or
flat (`<dir>/<trial>/model.patch, trajectory.json, test-stdout.txt, verifier/<file>, meta.json`).

Everything here is read as hostile input: manifests and indexes are bounded and parsed with the
depth-limited reader, trial names and verifier file names are checked before they become paths or
URLs, mirrors are read without following symlinks, downloads are bounded per file and written
atomically. A file the release does not publish (HTTP 403/404) or publishes empty is *absent*:
recorded, never an error. Nothing here decides what a trial means (residualize/release.py does).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import random
import re
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from http.client import HTTPException
from pathlib import Path, PurePosixPath
from typing import Any

from swe_residual.errors import InputError
from swe_residual.safe_read import (
    DeadlinePassed,
    Unsafe,
    body_chunks,
    download_deadline,
    is_dir,
    list_dir,
    open_within,
    parse_json,
    read_bytes,
    valid_text,
)

DEFAULT_RELEASE = "https://deepswe.datacurve.ai/artifacts/v1.1/release.json"
MANIFEST_NAME, INDEX_NAME, META_NAME = "release.json", "trials.json", "meta.json"
ABSENT_NAME = ".absent.json"  # in a download dir: files the release does not publish, and why

MAX_MANIFEST = 1 << 20
MAX_INDEX = 128 << 20  # the v1.1 index is ~50 MB (read whole: a bigger one is refused)
#: objects and arrays, and values (commas), an index may hold: a bound on what parsing it makes,
#: whatever its shape (the v1.1 index: ~50 MB in far fewer)
MAX_INDEX_CONTAINERS = 4_000_000
MAX_INDEX_VALUES = 16_000_000
#: the fields of an index row anything here reads, and the few kept as the row's evidence
#: (meta.json); the rest of a row (per-test lists) is dropped as it is parsed: a 48 MiB index
#: parsed whole took 2.3 GiB
ROW_KEYS = frozenset(
    {
        "trial_name",
        "task_name",
        "source",
        "eval_scope",
        "included_in_score",
        "model",
        "config",
        "harness",
        "provider",
        "reasoning_effort",
        "outcome",
        "passed",
        "reward",
        "errored",
        "error_category",
        "f2p_total",
        "f2p_passed",
        "p2p_total",
        "p2p_passed",
        "n_agent_steps",
        "agent_duration_seconds",
        "trial_duration_seconds",
        "has_model_patch",
        "has_trajectory",
        "verifier_files",
        "started_at",
        "finished_at",
        "cost_usd",
        "n_input_tokens",
        "n_cache_tokens",
        "n_output_tokens",
        "n_reasoning_tokens",
        "peak_context_tokens",
        "partial",
    }
)
MAX_PATCH = 64 << 20  # the harness's own final-patch bound
MAX_TRAJECTORY = 64 << 20
MAX_VERIFIER_FILE = 16 << 20  # each verifier file
MAX_VERIFIER_TOTAL = 64 << 20  # all verifier files of one trial

PATCH, TRAJECTORY, STDOUT = "model.patch", "trajectory.json", "verifier/test-stdout.txt"

#: the v1.1 manifest's patterns: used for a flat mirror that has no release.json
DEFAULT_PATTERNS = {
    "trajectory": "v1.1/trial-artifacts/{trial_name}/agent/trajectory.json",
    "model_patch": "v1.1/trial-artifacts/{trial_name}/artifacts/model.patch",
    "agent_log": "v1.1/trial-artifacts/{trial_name}/agent/mini-swe-agent.txt",
    "verifier_output": "v1.1/trial-artifacts/{trial_name}/verifier/test-stdout.txt",
    "verifier_file": "v1.1/trial-artifacts/{trial_name}/verifier/{file}",
}
REQUIRED_PATTERNS = ("trajectory", "model_patch", "verifier_file")

#: a trial name is a path component and a URL component: Harbor's `<task[:32]>__<7 chars>`
TRIAL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
_FILE_PART = re.compile(r"^[A-Za-z0-9_.+@=,-][A-Za-z0-9_.+@=, -]{0,199}$")


def _user_agent() -> str:
    try:
        from importlib.metadata import version

        return f"swe-residual/{version('swe-residual')} (DeepSWE release import)"
    except Exception:  # not installed as a distribution
        return "swe-residual (DeepSWE release import)"


USER_AGENT = _user_agent()


# -- the manifest and the index -------------------------------------------------------------------


@dataclass(frozen=True)
class Manifest:
    release_id: str
    artifact_base_url: str | None  # http(s) only; None for a local mirror without one
    key_prefix: str
    patterns: dict[str, str]
    where: str

    def key(self, kind: str, trial: str, file: str | None = None) -> str:
        """The artifact's key (its path below the base URL or a CDN-layout mirror)."""
        return self.patterns[kind].replace("{trial_name}", trial).replace("{file}", file or "")

    def url(self, key: str) -> str:
        assert self.artifact_base_url is not None
        return self.artifact_base_url.rstrip("/") + "/" + urllib.parse.quote(key, safe="/")


def parse_manifest(raw: bytes, where: str) -> Manifest:
    """The manifest's fields, checked (InputError naming the field). Patterns must be relative
    keys with `{trial_name}`; the base URL must be http(s)."""
    try:
        data = parse_json(raw, where)
    except Unsafe as exc:
        raise InputError(str(exc)) from None
    if not isinstance(data, dict):
        raise InputError(f"{where}: not a JSON object (a DeepSWE release manifest)")
    rid = data.get("release_id")
    if not isinstance(rid, str) or not rid.strip():
        raise InputError(f"{where}: release_id: missing")
    base = data.get("artifact_base_url")
    if base is not None and (
        not isinstance(base, str) or urllib.parse.urlsplit(base).scheme not in ("http", "https")
    ):
        raise InputError(f"{where}: artifact_base_url: {str(base)[:100]!r} is not an http(s) URL")
    patterns = data.get("artifact_patterns")
    if not isinstance(patterns, dict):
        raise InputError(f"{where}: artifact_patterns: missing")
    out = {}
    for kind, pattern in patterns.items():
        if not isinstance(pattern, str) or "{trial_name}" not in pattern:
            raise InputError(
                f"{where}: artifact_patterns.{kind}: {str(pattern)[:100]!r} has no {{trial_name}}"
            )
        probe = pattern.replace("{trial_name}", "t").replace("{file}", "f")
        if _unsafe_rel(probe):
            raise InputError(f"{where}: artifact_patterns.{kind}: {pattern[:100]!r} is not a relative key")
        out[str(kind)] = pattern
    missing = [k for k in REQUIRED_PATTERNS if k not in out]
    if missing:
        raise InputError(f"{where}: artifact_patterns: no {', '.join(missing)}")
    if "{file}" not in out["verifier_file"]:
        raise InputError(f"{where}: artifact_patterns.verifier_file: no {{file}}")
    prefix = data.get("artifact_key_prefix")
    return Manifest(
        release_id=rid.strip(),
        artifact_base_url=base,
        where=where,
        patterns=out,
        key_prefix=prefix.strip("/")
        if isinstance(prefix, str) and not _unsafe_rel(prefix.strip("/"))
        else out["model_patch"].split("{trial_name}")[0].strip("/"),
    )


def parse_index(raw: bytes, where: str) -> tuple[list[dict], int]:
    """The rows of trials.json (`{"rows": [...]}` or a bare list), each with its ROW_KEYS only, and
    how many entries were not objects (left out). An index of more objects, arrays or values than
    an index holds is refused before it is parsed."""
    containers, values = raw.count(b"{") + raw.count(b"["), raw.count(b",") + 1
    if containers > MAX_INDEX_CONTAINERS or values > MAX_INDEX_VALUES:
        raise InputError(
            f"{where}: {containers} objects and arrays, {values} values: over the {MAX_INDEX_CONTAINERS} "
            f"and {MAX_INDEX_VALUES} an index may hold; not read"
        )
    try:
        data = parse_json(raw, where, position=False, keep=("trial_name", ROW_KEYS))
    except Unsafe as exc:
        raise InputError(str(exc)) from None
    rows = data.get("rows") if isinstance(data, dict) else data
    if not isinstance(rows, list):
        raise InputError(f'{where}: neither {{"rows": [...]}} nor a list of rows')
    good = [r for r in rows if isinstance(r, dict)]
    return good, len(rows) - len(good)


@dataclass
class Selection:
    rows: list[dict]
    excluded: Counter = field(default_factory=Counter)  # reason -> rows left out

    def describe(self) -> str:
        return ", ".join(f"{n} {why}" for why, n in sorted(self.excluded.items())) or "none"


def _text(row: dict, key: str) -> str | None:
    v = row.get(key)
    if isinstance(v, bool) or v is None:
        return None
    return v.strip() or None if isinstance(v, str) else str(v)


def select_rows(rows: list[dict], *, models: list[str] = (), configs: list[str] = ()) -> Selection:
    """The rows of the leaderboard's scored DeepSWE runs (source deep-swe, eval_scope full,
    included_in_score true) of the models and configs asked for (exact names, case ignored; none
    asked: all). A trial named twice counts once."""
    want_m = {m.lower() for m in models}
    want_c = {c.lower() for c in configs}
    sel = Selection([])
    seen: set[str] = set()
    for row in rows:
        trial = row.get("trial_name")
        if not isinstance(trial, str) or not trial:
            sel.excluded["rows without a trial_name"] += 1
        elif row.get("source") != "deep-swe":
            sel.excluded["not source deep-swe"] += 1
        elif row.get("eval_scope") != "full":
            sel.excluded["not eval_scope full"] += 1
        elif row.get("included_in_score") is not True:
            sel.excluded["not included_in_score"] += 1
        elif want_m and (_text(row, "model") or "").lower() not in want_m:
            sel.excluded["other models"] += 1
        elif want_c and (_text(row, "config") or "").lower() not in want_c:
            sel.excluded["other configs"] += 1
        elif trial in seen:
            sel.excluded["trial named twice"] += 1
        else:
            seen.add(trial)
            sel.rows.append(row)
    return sel


def trial_problem(row: dict) -> str | None:
    """Why a row's trial_name cannot name files and URLs (None when it can)."""
    name = row.get("trial_name")
    if not isinstance(name, str) or not TRIAL_NAME.match(name):
        return f"trial_name {valid_text(str(name))[:80]!r} is not a safe name (letters, digits, . _ -)"
    if ".." in name:
        return f"trial_name {name!r} contains '..'"
    return None


def _unsafe_rel(rel: str) -> bool:
    parts = PurePosixPath(rel).parts
    return (
        not rel
        or rel.startswith("/")
        or "\\" in rel
        or "\0" in rel
        or not parts
        or any(p in ("..", ".", "") for p in parts)
        or rel != "/".join(parts)
    )


def verifier_names(row: dict) -> tuple[list[str], list[str]]:
    """The row's verifier_files that are safe relative names, and one reason per refused one
    (`..`, absolute, backslashes, control characters, surrogates...)."""
    names = row.get("verifier_files")
    if names is None:
        return [], []
    if not isinstance(names, list):
        return [], [f"verifier_files: not a list ({type(names).__name__})"]
    ok, refused = [], []
    for n in names[:200]:
        shown = valid_text(str(n))[:120]
        if not isinstance(n, str):
            refused.append(f"verifier_files: {shown!r}: not a string")
        elif (
            n != valid_text(n)
            or _unsafe_rel(n)
            or not all(_FILE_PART.match(p) for p in n.split("/"))
            or n.count("/") > 4
        ):
            refused.append(f"verifier_files: {shown!r}: not a relative file name inside verifier/; refused")
        elif n not in ok:
            ok.append(n)
    if len(names) > 200:
        refused.append(f"verifier_files: {len(names)} names; only the first 200 read")
    return ok, refused


@dataclass(frozen=True)
class Artifact:
    rel: str  # where it goes in the flat layout (model.patch, trajectory.json, verifier/<f>)
    kind: str  # the manifest pattern that names it
    file: str | None  # {file} for verifier files
    limit: int


def artifacts(row: dict) -> tuple[list[Artifact], dict[str, str], list[str]]:
    """What to fetch for a row: the patch, the trajectory and its verifier files; plus the files
    the row itself says do not exist (rel -> reason) and the names refused."""
    out, absent = [], {}
    if row.get("has_model_patch") is False:
        absent[PATCH] = "the row says none (has_model_patch false)"
    else:
        out.append(Artifact(PATCH, "model_patch", None, MAX_PATCH))
    if row.get("has_trajectory") is False:
        absent[TRAJECTORY] = "the row says none (has_trajectory false)"
    else:
        out.append(Artifact(TRAJECTORY, "trajectory", None, MAX_TRAJECTORY))
    names, refused = verifier_names(row)
    for n in names:
        out.append(Artifact(f"verifier/{n}", "verifier_file", n, MAX_VERIFIER_FILE))
    return out, absent, refused


# -- fetching over HTTP ---------------------------------------------------------------------------


class Transient(Exception):
    """A fetch that failed after its retries (5xx, timeouts, connection errors): try again later."""


class Oversize(Exception):
    """A file over its bound."""


@dataclass
class Got:
    data: bytes | None  # None: absent
    absent: str | None = None  # why absent: "HTTP 403", "empty"
    link: str | None = None  # the Link header of a 200 (paged listings name their next page there)


class Http:
    """GETs with a User-Agent, bounded bodies, a deadline per GET (a trickling server is given up
    at once, not retried) and retries with exponential backoff (5xx, 429, timeouts, dropped
    connections). Each worker thread keeps one persistent connection per host
    (HTTP/1.1 keep-alive: no TCP and TLS handshake per file, which is most of the cost of ~8 small
    files per trial); with a proxy configured (HTTP(S)_PROXY) it goes through urllib instead.
    After `abort_after` fetches in a row gave up, every later fetch gives up at once (the server
    is gone: finish what is done, resume later)."""

    MAX_REDIRECTS = 5

    def __init__(
        self, *, timeout: float = 30.0, retries: int = 4, backoff: float = 0.5, abort_after: int = 3
    ):
        self.timeout, self.retries, self.backoff, self.abort_after = timeout, retries, backoff, abort_after
        self.deadline = download_deadline()  # seconds one GET may take in all
        self.requests = 0
        self.gave_up = 0
        self.aborted: str | None = None
        self._lock = threading.Lock()
        self._local = threading.local()
        self._proxies = urllib.request.getproxies()

    def get(self, url: str, limit: int) -> Got:
        if self.aborted:
            raise Transient(self.aborted)
        problem = ""
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self._delay(attempt, problem))
                if self.aborted:
                    raise Transient(self.aborted)
            try:
                got = self._once(url, limit)
            except _Retry as exc:
                problem = str(exc)
                if time.monotonic() < self._local.deadline:
                    continue
                raise Transient(  # cut off by the watchdog
                    f"not downloaded within {self.deadline:g} s (the deadline of one download, "
                    "$SWE_RESIDUAL_DOWNLOAD_DEADLINE)"
                ) from None
            except DeadlinePassed:  # a trickling server: asked again, it would trickle again
                raise Transient(
                    f"not downloaded within {self.deadline:g} s (the deadline of one download, "
                    "$SWE_RESIDUAL_DOWNLOAD_DEADLINE)"
                ) from None
            with self._lock:
                self.gave_up = 0
            return got
        with self._lock:
            self.gave_up += 1
            if self.gave_up >= self.abort_after and not self.aborted:
                self.aborted = (
                    f"{self.gave_up} fetches in a row failed after {self.retries} retries (last: {problem})"
                )
        raise Transient(f"{problem} (after {self.retries} retries)")

    def _delay(self, attempt: int, problem: str) -> float:
        m = re.search(r"retry-after (\d+)", problem)
        base = float(m.group(1)) if m else self.backoff * (2 ** (attempt - 1))
        return min(30.0, base) * (0.75 + random.random() / 2)

    def _once(self, url: str, limit: int) -> Got:
        with self._lock:
            self.requests += 1
        self._local.deadline = time.monotonic() + self.deadline
        parts = urllib.parse.urlsplit(url)
        if parts.scheme in self._proxies and not urllib.request.proxy_bypass(parts.hostname or ""):
            return self._once_urllib(url, limit)
        for _ in range(self.MAX_REDIRECTS + 1):
            status, headers, data = self._exchange(parts, limit)
            if status in (301, 302, 303, 307, 308) and headers.get("Location"):
                parts = urllib.parse.urlsplit(urllib.parse.urljoin(parts.geturl(), headers["Location"]))
                if parts.scheme not in ("http", "https"):
                    return Got(None, f"HTTP {status} to a non-http(s) URL")
                continue
            if status == 429 or status >= 500:
                after = headers.get("Retry-After", "")
                raise _Retry(f"HTTP {status}" + (f" retry-after {after}" if after.isdigit() else ""))
            if status != 200:
                return Got(None, f"HTTP {status}")
            return Got(data, link=headers.get("Link")) if data else Got(None, "empty")
        return Got(None, f"more than {self.MAX_REDIRECTS} redirects")

    def _exchange(self, parts: urllib.parse.SplitResult, limit: int) -> tuple[int, Any, bytes]:
        """_exchange_within with a watchdog: at the deadline this thread's connection to the host
        is shut down, so a server trickling its status line or headers is cut off too."""
        conns = self._local.__dict__.setdefault("conns", {})
        key = (parts.scheme, parts.hostname, parts.port)
        watchdog = threading.Timer(
            max(0.0, self._local.deadline - time.monotonic()), lambda: _cut(conns.get(key))
        )
        watchdog.daemon = True
        watchdog.start()
        try:
            return self._exchange_within(parts, limit, conns)
        finally:
            watchdog.cancel()

    def _exchange_within(
        self, parts: urllib.parse.SplitResult, limit: int, conns: dict
    ) -> tuple[int, Any, bytes]:
        """One GET on this thread's connection to the host (a fresh one if the kept one went
        stale); the body only for a 200 (bounded), drained otherwise so the connection stays usable."""
        key = (parts.scheme, parts.hostname, parts.port)
        path = urllib.parse.urlunsplit(("", "", parts.path or "/", parts.query, ""))
        for fresh in (False, True):
            conn = conns.get(key)
            reused = conn is not None and not fresh
            if conn is None or fresh:
                if conn is not None:
                    conn.close()
                cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
                conn = conns[key] = cls(parts.hostname, parts.port, timeout=self.timeout)
            try:
                conn.request("GET", path, headers={"User-Agent": USER_AGENT, "Accept-Encoding": "identity"})
                resp = conn.getresponse()
            except TimeoutError:
                conns.pop(key, None).close()
                raise _Retry(f"no answer within {self.timeout:g} s") from None
            except (HTTPException, OSError) as exc:
                conns.pop(key, None).close()
                if reused:
                    continue  # the server closed the kept connection meanwhile: once more, on a new one
                raise _Retry(
                    f"cannot connect or connection dropped: {type(exc).__name__}: {exc}"[:200]
                ) from None
            try:
                if resp.status != 200:
                    body = resp.read(1 << 16)
                    if not resp.isclosed():
                        raise Oversize("")  # a big error page: drop the connection rather than read it
                    return resp.status, resp.headers, body
                length = resp.headers.get("Content-Length")
                if length is not None and length.isdigit() and int(length) > limit:
                    raise Oversize(f"{int(length)} bytes, over the {_size(limit)} bound")
                data = _read_bounded(resp, limit, self._local.deadline)
                if resp.will_close:
                    conns.pop(key, None).close()
                return resp.status, resp.headers, data
            except Oversize:
                conns.pop(key, None).close()
                if resp.status != 200:
                    return resp.status, resp.headers, b""
                raise
            except TimeoutError:
                conns.pop(key, None).close()
                raise _Retry(f"no answer within {self.timeout:g} s") from None
            except (HTTPException, OSError) as exc:
                conns.pop(key, None).close()
                raise _Retry(f"connection dropped: {type(exc).__name__}: {exc}"[:200]) from None
        raise _Retry("connection dropped twice")

    def _once_urllib(self, url: str, limit: int) -> Got:
        req = urllib.request.Request(url, headers={"User-Agent": USER_AGENT, "Accept-Encoding": "identity"})
        try:
            with open_within(req, self._local.deadline, self.timeout) as resp:
                length = resp.headers.get("Content-Length")
                if length is not None and length.isdigit() and int(length) > limit:
                    raise Oversize(f"{int(length)} bytes, over the {_size(limit)} bound")
                data = _read_bounded(resp, limit, self._local.deadline)
                link = resp.headers.get("Link")
        except urllib.error.HTTPError as exc:
            exc.close()
            if exc.code == 429 or exc.code >= 500:
                after = exc.headers.get("Retry-After", "") if exc.headers else ""
                raise _Retry(
                    f"HTTP {exc.code}" + (f" retry-after {after}" if after.isdigit() else "")
                ) from None
            return Got(None, f"HTTP {exc.code}")
        except urllib.error.URLError as exc:
            raise _Retry(f"cannot connect: {getattr(exc, 'reason', exc)}") from None
        except TimeoutError:
            raise _Retry(f"no answer within {self.timeout:g} s") from None
        except (HTTPException, ConnectionError, OSError) as exc:
            raise _Retry(f"connection dropped: {type(exc).__name__}: {exc}"[:200]) from None
        if not data:
            return Got(None, "empty")
        return Got(data, link=link)

    def get_document(self, url: str, limit: int, what: str) -> bytes:
        """A manifest or index: absent or unreachable is an InputError naming the URL."""
        try:
            got = self.get(url, limit)
        except Transient as exc:
            raise InputError(f"{url}: {what} cannot be fetched: {exc}") from None
        except Oversize as exc:
            raise InputError(f"{url}: {what}: {exc}") from None
        if got.data is None:
            raise InputError(f"{url}: {what} cannot be fetched ({got.absent})")
        return got.data


class _Retry(Exception):
    pass


def _cut(conn: http.client.HTTPConnection | None) -> None:
    """Shut a connection's socket down from another thread: a read blocked on it returns."""
    sock = getattr(conn, "sock", None)
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


def _read_bounded(resp, limit: int, deadline: float) -> bytes:
    """The body, at most `limit` bytes (Oversize), by `deadline` (DeadlinePassed)."""
    chunks, total = [], 0
    for chunk in body_chunks(resp, deadline, 1 << 20):
        chunks.append(chunk)
        total += len(chunk)
        if total > limit:
            raise Oversize(f"over the {_size(limit)} bound")
    return b"".join(chunks)


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n} bytes"


# -- where a release is ---------------------------------------------------------------------------


@dataclass
class Release:
    manifest: Manifest
    rows: list[dict]
    not_rows: int  # index entries that were not objects
    where: str  # the manifest's URL or path
    index_where: str
    index_bytes: int
    mirror: Path | None = None  # a local mirror to read artifacts from (else download them)
    seconds: dict[str, float] = field(default_factory=dict)


def open_release(spec: str, http: Http) -> Release:
    """The release a --release names: an http(s) URL of the manifest (or of its directory), a
    file:// URL or a path of the manifest, or a mirror dir (release.json + trials.json, or a flat
    mirror whose trial dirs hold meta.json)."""
    t0 = time.perf_counter()
    parts = urllib.parse.urlsplit(spec)
    if parts.scheme in ("http", "https"):
        url = spec if parts.path.endswith(".json") else spec.rstrip("/") + "/" + MANIFEST_NAME
        manifest = parse_manifest(http.get_document(url, MAX_MANIFEST, "release manifest"), url)
        t1 = time.perf_counter()
        index_url = urllib.parse.urljoin(url, INDEX_NAME)
        raw = http.get_document(index_url, MAX_INDEX, "release index")
        t2 = time.perf_counter()
        rows, bad = parse_index(raw, index_url)
        if manifest.artifact_base_url is None:
            raise InputError(f"{url}: artifact_base_url: missing (where the trials' files are)")
        return Release(
            manifest,
            rows,
            bad,
            url,
            index_url,
            len(raw),
            seconds={"manifest": t1 - t0, "index_fetch": t2 - t1, "index_parse": time.perf_counter() - t2},
        )
    if parts.scheme == "file":
        spec = urllib.request.url2pathname(parts.path)
    elif parts.scheme and len(parts.scheme) > 1:
        raise InputError(f"--release {spec}: not an http(s) or file:// URL, nor a path")
    return _open_local(Path(spec), t0)


def _open_local(path: Path, t0: float) -> Release:
    if path.is_dir():
        root, name = path, MANIFEST_NAME
    elif path.is_file():
        root, name = path.parent, path.name
    else:
        raise InputError(f"--release {path}: no such file or directory")
    where = str(root / name)
    try:
        raw = read_bytes(root, name, MAX_MANIFEST)
        if raw is None and not path.is_dir():
            raise InputError(f"{where}: missing")
        manifest = parse_manifest(raw, where) if raw is not None else None
        t1 = time.perf_counter()
        index = read_bytes(root, INDEX_NAME, MAX_INDEX)
    except Unsafe as exc:
        raise InputError(str(exc)) from None
    if index is not None:
        rows, bad = parse_index(index, str(root / INDEX_NAME))
        size = len(index)
    else:
        rows, bad, size = _flat_rows(root)
        if not rows and not bad:
            raise InputError(
                f"{root}: no {INDEX_NAME} and no trial dirs with {META_NAME} (not a DeepSWE release mirror)"
            )
    t2 = time.perf_counter()
    if manifest is None:
        manifest = Manifest(
            release_id="local",
            artifact_base_url=None,
            key_prefix="v1.1/trial-artifacts",
            patterns=dict(DEFAULT_PATTERNS),
            where=where,
        )
    mirror = root if _holds_artifacts(root, manifest, rows) else None
    if mirror is None and manifest.artifact_base_url is None:
        raise InputError(
            f"{root}: holds no trial files (CDN layout {manifest.key_prefix}/ or flat <trial>/) and the "
            "manifest names no artifact_base_url"
        )
    return Release(
        manifest,
        rows,
        bad,
        where,
        str(root / INDEX_NAME),
        size,
        mirror=mirror,
        seconds={"manifest": t1 - t0, "index_fetch": 0.0, "index_parse": t2 - t1},
    )


def _flat_rows(root: Path) -> tuple[list[dict], int, int]:
    """Rows of a flat mirror without trials.json: each trial dir's meta.json."""
    rows, bad, size = [], 0, 0
    for name, kind in list_dir(root):
        if kind != "dir":
            continue
        try:
            raw = read_bytes(root, f"{name}/{META_NAME}", MAX_MANIFEST)
        except Unsafe:
            bad += 1
            continue
        if raw is None:
            continue
        size += len(raw)
        try:
            row = parse_json(raw, root / name / META_NAME)
        except Unsafe:
            bad += 1
            continue
        if isinstance(row, dict):
            row.setdefault("trial_name", name)
            rows.append(row)
        else:
            bad += 1
    return rows, bad, size


def _holds_artifacts(root: Path, manifest: Manifest, rows: list[dict]) -> bool:
    if manifest.key_prefix and is_dir(root, manifest.key_prefix):
        return True
    names = {n for n, kind in list_dir(root) if kind == "dir"}
    return any(isinstance(r.get("trial_name"), str) and r["trial_name"] in names for r in rows[:100000])


# -- one trial's files ----------------------------------------------------------------------------


@dataclass
class TrialFiles:
    """What a trial's files hold, from a mirror or a download dir. Absent files are named with
    why; files that are there but not read (symlink, over the bound, ...) are one note each."""

    trial: str
    row: dict
    where: str  # the dir they were read from
    files: dict[str, bytes] = field(default_factory=dict)  # rel (flat layout) -> bytes
    absent: dict[str, str] = field(default_factory=dict)  # rel -> reason
    notes: list[str] = field(default_factory=list)
    layout: str = "flat"  # cdn | flat
    refused: str | None = None  # the trial cannot be imported: why

    def note(self, rel: str, why: str) -> None:
        self.notes.append(f"trial {self.trial}: {rel}: {why}")


def trial_dir_key(manifest: Manifest, trial: str) -> str:
    """The trial's dir in the CDN layout (the model_patch pattern up to its {trial_name})."""
    return manifest.patterns["model_patch"].split("{trial_name}")[0] + trial


def read_local(root: Path, manifest: Manifest, row: dict) -> TrialFiles:
    """A trial's files from a mirror in the CDN layout or the flat one (`root/<trial>/...`).
    Never follows a symlink (a trial dir that is one is refused); every file bounded."""
    trial = row["trial_name"]
    wanted, absent, refused = artifacts(row)
    t = TrialFiles(trial, row, str(root / trial))
    for why in refused:
        t.note("verifier_files", why.split(": ", 1)[1] if ": " in why else why)
    t.absent.update(absent)
    cdn_dir = trial_dir_key(manifest, trial)
    cdn = is_dir(root, cdn_dir)
    t.layout = "cdn" if cdn else "flat"
    where = cdn_dir if cdn else trial
    t.where = str(root / where)
    parent, _, name = where.rpartition("/")
    if any(n == name and k in ("symlink", "other") for n, k in list_dir(root, parent)):
        t.refused = f"trial {trial}: {root / where}: a symlink or not a directory; not followed"
        return t
    total = 0
    for a in wanted:
        if a.rel in t.absent:
            continue
        if cdn:
            candidates = [manifest.key(a.kind, trial, a.file)]
        else:
            candidates = [f"{trial}/{a.rel}"] + ([f"{trial}/test-stdout.txt"] if a.rel == STDOUT else [])
        data, problem = None, None
        for rel in candidates:
            try:
                data = read_bytes(root, rel, a.limit)
            except (Unsafe, ValueError) as exc:
                problem = str(exc)
                break
            if data is not None:
                break
        if problem:
            t.note(a.rel, problem)
            if "bound" in problem:  # as a download records it: absent, over its bound
                t.absent[a.rel] = f"over its bound ({problem.rsplit(': ', 1)[-1].split('; ')[0]})"
        elif data is None:
            t.absent[a.rel] = "not in the mirror"
        elif not data:
            t.absent[a.rel] = "empty"
        elif a.rel.startswith("verifier/") and total + len(data) > MAX_VERIFIER_TOTAL:
            t.note(a.rel, f"verifier files over {MAX_VERIFIER_TOTAL >> 20} MiB in all; not kept")
        else:
            total += len(data) if a.rel.startswith("verifier/") else 0
            t.files[a.rel] = data
    return t


@dataclass
class Download:
    """The outcome of downloading one trial's missing files into its download dir."""

    fetched: int = 0  # files written
    data: dict[str, bytes] = field(default_factory=dict)  # rel -> what was fetched (and written)
    requests: int = 0
    absent: dict[str, str] = field(default_factory=dict)  # rel -> reason (recorded now or before)
    notes: list[str] = field(default_factory=list)  # files refused (over their bound)
    incomplete: str | None = None  # a fetch that failed: rerun to finish


def download_trial(http: Http, manifest: Manifest, row: dict, dest: Path) -> Download:
    """Fetch the trial's files that `dest` (its flat download dir) lacks and that are not known
    absent; each written atomically (temp + rename), so a file there is complete. The absent ones
    are recorded in dest/.absent.json. Stops at the first fetch that fails after its retries."""
    trial = row["trial_name"]
    out = Download()
    have = _listing(dest)
    if have is None:
        dest.mkdir(parents=True, exist_ok=True)
        have = set()
    known = read_absent(dest) if ABSENT_NAME in have else {}
    wanted, _, _ = artifacts(row)
    made = {n.rstrip("/") for n in have if n.endswith("/")}
    for a in wanted:
        if a.rel in known or a.rel in have:
            continue
        url = manifest.url(manifest.key(a.kind, trial, a.file))
        out.requests += 1
        try:
            got = http.get(url, a.limit)
        except Transient as exc:
            out.incomplete = f"trial {trial}: {a.rel}: {exc}"
            break
        except Oversize as exc:
            out.notes.append(f"trial {trial}: {a.rel}: {exc}; not kept")
            out.absent[a.rel] = f"over its bound ({exc})"
            continue
        if got.data is None:
            out.absent[a.rel] = got.absent or "absent"
            continue
        target = dest / a.rel
        parent = a.rel.rpartition("/")[0]
        if parent and parent not in made:
            target.parent.mkdir(parents=True, exist_ok=True)
            made.add(parent)
        _write_atomic(target, got.data)
        out.data[a.rel] = got.data
        out.fetched += 1
    if out.absent:
        _write_atomic(
            dest / ABSENT_NAME, json.dumps({**known, **out.absent}, indent=1, sort_keys=True).encode()
        )
    if META_NAME not in have:
        _write_atomic(dest / META_NAME, (json.dumps(row, sort_keys=True, ensure_ascii=True) + "\n").encode())
    out.absent = {**known, **out.absent}
    return out


def _listing(d: Path) -> set[str] | None:
    """The files of a download dir as flat names (model.patch, verifier/ctrf.json, `verifier/`
    for the dir itself); None when it does not exist. Our own dir: one scandir, no stat per file."""
    try:
        names: set[str] = set()
        with os.scandir(d) as it:
            for e in it:
                if e.is_dir(follow_symlinks=False):
                    for sub, _, files in os.walk(e.path):
                        rel = os.path.relpath(sub, d)
                        names.add(rel + "/")
                        names.update(f"{rel}/{f}" for f in files)
                elif e.is_file(follow_symlinks=False):
                    names.add(e.name)
        return names
    except FileNotFoundError:
        return None


def download_files(dest: Path, row: dict, dl: Download) -> TrialFiles:
    """The TrialFiles of a download dir right after download_trial: what it fetched from memory,
    what an earlier run fetched from the dir (read without following links, bounded)."""
    trial = row["trial_name"]
    wanted, absent, refused = artifacts(row)
    t = TrialFiles(trial, row, str(dest), layout="flat")
    for why in refused:
        t.note("verifier_files", why.split(": ", 1)[1] if ": " in why else why)
    t.absent.update(absent)
    t.absent.update(dl.absent)
    total = 0
    for a in wanted:
        if a.rel in t.absent:
            continue
        data = dl.data.get(a.rel)
        if data is None:
            try:
                data = read_bytes(dest, a.rel, a.limit)
            except (Unsafe, ValueError) as exc:
                t.note(a.rel, str(exc))
                continue
        if data is None:
            t.absent[a.rel] = "not downloaded"
        elif a.rel.startswith("verifier/") and total + len(data) > MAX_VERIFIER_TOTAL:
            t.note(a.rel, f"verifier files over {MAX_VERIFIER_TOTAL >> 20} MiB in all; not kept")
        else:
            total += len(data) if a.rel.startswith("verifier/") else 0
            t.files[a.rel] = data
    return t


def read_absent(dest: Path) -> dict[str, str]:
    """The absent files recorded in a download dir (an unreadable record counts as none)."""
    try:
        raw = read_bytes(dest, ABSENT_NAME, MAX_MANIFEST)
        data = parse_json(raw, dest / ABSENT_NAME) if raw else {}
    except (Unsafe, ValueError):
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


_PID = os.getpid()


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{_PID}.{threading.get_ident()}.part")
    with open(tmp, "wb", buffering=0) as fh:
        fh.write(data)
    os.replace(tmp, path)


# -- what the files say ---------------------------------------------------------------------------

SUBMIT_SENTINEL = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


def atif_declared_complete(data: dict) -> bool | None:
    """Whether mini-swe-agent declared completion, from its ATIF export (Harbor converts
    mini-swe-agent 2.x trajectories; the `exit` message that holds exit_status is not converted).
    mini-swe-agent stops with Submitted when a command prints COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT
    as its first line, and records no observation for it: so the run declared completion when the
    last agent step calls a command naming the sentinel with no output, or output starting with it.
    None when the trajectory has no agent step (nothing to tell)."""
    steps = data.get("steps")
    if not isinstance(steps, list):
        return None
    last = next((s for s in reversed(steps) if isinstance(s, dict) and s.get("source") == "agent"), None)
    if last is None:
        return None
    calls = last.get("tool_calls") if isinstance(last.get("tool_calls"), list) else []
    observation = last.get("observation") if isinstance(last.get("observation"), dict) else {}
    results = (
        [r for r in observation.get("results") or [] if isinstance(r, dict)]
        if isinstance(observation.get("results"), list)
        else []
    )
    by_id = {r.get("source_call_id"): r.get("content") for r in results if r.get("source_call_id")}
    loose = [r.get("content") for r in results if not r.get("source_call_id")]
    for i, call in enumerate(c for c in calls if isinstance(c, dict)):
        args = call.get("arguments")
        command = args.get("command") if isinstance(args, dict) else args
        if not isinstance(command, str) or SUBMIT_SENTINEL not in command:
            continue
        out = by_id.get(call.get("tool_call_id"), loose[i] if i < len(loose) else None)
        if out is None:
            return True
        text = out if isinstance(out, str) else json.dumps(out)[:1000] if out is not None else ""
        first = (text.lstrip().splitlines() or [""])[0].strip()
        if first == SUBMIT_SENTINEL or first.endswith(SUBMIT_SENTINEL):
            return True
    return False


_PYTEST_LINE = re.compile(r"^(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\s+(\S+?)(?:\s+-\s.*)?$")
_PYTEST_VERBOSE = re.compile(r"^(\S+::\S+)\s+(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\b")
_PYTEST_STATUS = {
    "PASSED": "passed",
    "XPASS": "passed",
    "FAILED": "failed",
    "ERROR": "failed",
    "SKIPPED": "skipped",
    "XFAIL": "skipped",
}


def pytest_statuses(text: str) -> dict[str, str]:
    """Per-test statuses from pytest's console output (the short summary's `FAILED id - ...`
    lines, `-rA`'s `PASSED id`, `-v`'s `id PASSED`), with node ids written as JUnit ids
    (`tests/test_x.py::TestA::test_b[1]` -> `tests.test_x.TestA.test_b[1]`), as DeepSWE's
    config.json names them."""
    out: dict[str, str] = {}
    for line in text.splitlines()[-100000:]:
        line = line.strip()
        m = _PYTEST_LINE.match(line)
        status, node = (m.group(1), m.group(2)) if m else (None, None)
        if m is None:
            v = _PYTEST_VERBOSE.match(line)
            if v is None:
                continue
            node, status = v.group(1), v.group(2)
        if "::" not in node:
            continue
        tid = junit_id(node)
        st = _PYTEST_STATUS[status]
        if out.get(tid) != "failed":
            out[tid] = st
    return out


def junit_id(node: str) -> str:
    """A pytest node id as JUnit's classname.name."""
    path, _, rest = node.partition("::")
    params = ""
    if "[" in rest and rest.endswith("]"):
        rest, params = rest[: rest.index("[")], rest[rest.index("[") :]
    module = path[:-3] if path.endswith(".py") else path
    return ".".join([module.replace("/", "."), *rest.split("::")]) + params


def reward_of(data: Any) -> float | None:
    """`reward` of a reward.json (Pier's verifier_result.rewards keys), when it is a finite number."""
    value = data.get("reward") if isinstance(data, dict) else data
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or value != value
        or value in (float("inf"), float("-inf"))
    ):
        return None
    return float(value)


# DeepSWE's published grader.py (tests/grader.py `grade`) prints, into test-stdout.txt, one line
# per graded test that did not pass and one summary line; the tests that passed are only counted:
#   [verifier] ✗ [f2p] tests.test_x.TestA.test_b
#   P2P 3134/3134 pass 0 fail; F2P 132/137 pass 5 fail; PARTIAL 0.998; BINARY 0
_GRADER_FAIL = re.compile(r"^\[verifier\] \S+ \[(f2p|p2p)\] (\S.*?)\s*$")
_GRADER_SUMMARY = re.compile(
    r"\bP2P (\d+)/(\d+) pass(?: (\d+) fail)?; F2P (\d+)/(\d+) pass(?: (\d+) fail)?(?:;|\s*$)"
)


@dataclass
class GraderReport:
    """What the grader's own lines in test-stdout.txt say: the graded tests that did not pass, by
    name (their bucket, f2p or p2p), and the counts of each bucket."""

    failing: dict[str, str]  # test id -> "f2p" | "p2p"
    f2p_passed: int
    f2p_total: int
    p2p_passed: int
    p2p_total: int

    @property
    def complete(self) -> bool:
        """The named failures are all the failures the counts give (none cut from the output)."""
        return len(self.failing) == self.f2p_total - self.f2p_passed + self.p2p_total - self.p2p_passed


def grader_report(text: str) -> GraderReport | None:
    """The grader's failure lines and its summary line (the last ones, when the grader ran more
    than once); None when the output holds no summary line."""
    failing: dict[str, str] = {}
    report = None
    for line in text.splitlines()[-200000:]:
        if m := _GRADER_FAIL.match(line):
            failing.setdefault(m.group(2), m.group(1))
        elif m := _GRADER_SUMMARY.search(line):
            pp, pt, _, fp, ft, _ = (int(g) if g is not None else 0 for g in m.groups())
            report = GraderReport(failing, f2p_passed=fp, f2p_total=ft, p2p_passed=pp, p2p_total=pt)
            failing = {}
    return report

"""Local Docker engine and offline base images.

No container registry can be reached on the machines this project runs on, so
base images named in task Dockerfiles (``FROM debian:bookworm-slim`` ...) are
built locally with ``debootstrap`` and ``docker import``-ed under the requested
names.  See /work/shared/docs/MACHINE.md for the machine facts behind this.

Public API:

* :func:`ensure_docker_daemon` - start ``dockerd`` (as root) if it is not answering.
* :func:`bootstrap_base_images` - build missing base images from a debootstrap rootfs.
* :func:`base_images_of` - the distinct external ``FROM`` images of Dockerfiles.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pathlib
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator

DOCKERD_LOG = "/var/log/dockerd.log"
DOCKER_PID_FILE = "/var/run/docker.pid"
CONTAINERD_PID_FILE = "/var/run/docker/containerd/containerd.pid"

DEFAULT_SUITE = "bookworm"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
DEBOOTSTRAP_INCLUDE = "python3,python3-pip,python3-venv,git,ca-certificates"
HOST_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
HOST_LOCAL_CA_DIR = "/usr/local/share/ca-certificates"
ARCHIVE_KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"

BOOTSTRAP_LABEL = "swe-residual.bootstrap"
SUITE_LABEL = "swe-residual.suite"
IMAGE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

_LOCK_FILE = os.path.join(tempfile.gettempdir(), "swe-residual-bootstrap.lock")

__all__ = [
    "ensure_docker_daemon",
    "bootstrap_base_images",
    "base_images_of",
    "host_apt_mirrors",
]


# --------------------------------------------------------------------------- daemon


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return " ".join(text.split())[:300]


def _ping(timeout: float = 5.0) -> str | None:
    """None if the engine answers a ping, else a one-line reason."""
    try:
        import docker  # noqa: PLC0415 - optional dependency, checked at run time
    except ImportError:
        return "the 'docker' Python SDK is not installed (pip install 'docker>=7')"
    client = None
    try:
        client = docker.from_env(timeout=max(1, int(timeout)))
        client.ping()
        return None
    except Exception as exc:  # DockerException, requests errors, PermissionError ...
        return f"Docker engine not reachable: {_one_line(exc)}"
    finally:
        if client is not None:
            with contextlib.suppress(Exception):
                client.close()


def _pid_state(pid: int) -> str | None:
    """Process state letter from /proc (e.g. 'S', 'Z'), or None if there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def _pid_alive(pid: int) -> bool:
    state = _pid_state(pid)
    return state is not None and state not in ("Z", "X")


def _pid_comm(pid: int) -> str:
    try:
        return pathlib.Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _read_pid(path: str) -> int | None:
    try:
        return int(pathlib.Path(path).read_text().strip())
    except (OSError, ValueError):
        return None


def _clear_stale_pid_file(path: str, comm: str) -> int | None:
    """Remove ``path`` unless it names a live process called ``comm``; return that live pid."""
    if not os.path.exists(path):
        return None
    pid = _read_pid(path)
    if pid is not None and _pid_alive(pid) and _pid_comm(pid) == comm:
        return pid
    with contextlib.suppress(FileNotFoundError):
        os.remove(path)
    return None


def _log_tail(path: str, offset: int = 0, lines: int = 25) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            data = fh.read().decode("utf-8", "replace")
    except OSError as exc:
        return f"(cannot read {path}: {exc})"
    return "\n".join(data.splitlines()[-lines:]) or "(empty)"


def ensure_docker_daemon(timeout: float = 60) -> int | None:
    """Make sure a Docker engine answers; start ``dockerd`` as root if needed.

    If the engine does not answer and we are root with ``dockerd`` on PATH, a
    stale /var/run/docker.pid is removed, ``dockerd`` is started detached (own
    session, survives this process) logging to /var/log/dockerd.log, and we
    wait up to ``timeout`` seconds for it to answer.  Raises RuntimeError with
    the reason (and the log tail when we started it) otherwise. Returns the pid of the dockerd it
    waited for (started now, or found starting), None when the engine answered at once.
    """
    reason = _ping()
    if reason is None:
        return None
    if os.geteuid() != 0:
        raise RuntimeError(f"{reason}; not root, so dockerd cannot be started here")
    dockerd = shutil.which("dockerd")
    if dockerd is None:
        raise RuntimeError(f"{reason}; dockerd is not installed (apt-get install -y docker.io)")

    deadline = time.monotonic() + timeout
    running = _clear_stale_pid_file(DOCKER_PID_FILE, "dockerd")
    log_offset = 0
    if running is None:
        # dockerd supervises its own containerd; a recycled pid in its pid file confuses it.
        _clear_stale_pid_file(CONTAINERD_PID_FILE, "containerd")
        os.makedirs(os.path.dirname(DOCKERD_LOG), exist_ok=True)
        with open(DOCKERD_LOG, "ab") as fh:
            fh.write(
                f"\n=== swe_residual.backends.docker.bootstrap: starting {dockerd} at {time.ctime()} ===\n".encode()
            )
            log_offset = fh.tell()
        # Double fork through sh: dockerd is re-parented to init, in its own session,
        # so it outlives us and never becomes our zombie.
        launcher = subprocess.run(
            ["sh", "-c", '"$1" >>"$2" 2>&1 </dev/null & echo $!', "sh", dockerd, DOCKERD_LOG],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            start_new_session=True,
            check=True,
        )
        running = int(launcher.stdout.strip())
    while True:
        if _ping(timeout=2) is None:
            return running
        if not _pid_alive(running):
            raise RuntimeError(
                f"dockerd (pid {running}) exited before answering; see {DOCKERD_LOG}:\n"
                + _log_tail(DOCKERD_LOG, log_offset)
            )
        if time.monotonic() >= deadline:
            raise RuntimeError(
                f"dockerd (pid {running}) did not answer within {timeout:g} s; see {DOCKERD_LOG}:\n"
                + _log_tail(DOCKERD_LOG, log_offset)
            )
        time.sleep(0.5)


# --------------------------------------------------------------------------- mirrors


def _parse_deb822(text: str) -> list[dict[str, str]]:
    stanzas: list[dict[str, str]] = []
    cur: dict[str, str] = {}
    key = None
    for raw in text.splitlines():
        if not raw.strip():
            if cur:
                stanzas.append(cur)
            cur, key = {}, None
            continue
        if raw.lstrip().startswith("#"):
            continue
        if raw[0] in " \t" and key:
            cur[key] += " " + raw.strip()
            continue
        if ":" in raw:
            key, _, value = raw.partition(":")
            key = key.strip().lower()
            cur[key] = value.strip()
    if cur:
        stanzas.append(cur)
    return stanzas


def host_apt_mirrors() -> tuple[str, str | None]:
    """``(debian_mirror, security_mirror_or_None)`` as configured on this host, read now."""
    mirror: str | None = None
    security: str | None = None
    deb822 = pathlib.Path("/etc/apt/sources.list.d/debian.sources")
    if deb822.is_file():
        text = deb822.read_text(errors="replace")
        for line in text.splitlines():  # brief: the first URIs: line is the mirror
            if line.strip().lower().startswith("uris:"):
                uris = line.split(":", 1)[1].split()
                if uris:
                    mirror = uris[0]
                    break
        for st in _parse_deb822(text):
            suites = st.get("suites", "").split()
            uris = st.get("uris", "").split()
            if uris and any(s.endswith("-security") or s.endswith("/updates") for s in suites):
                security = uris[0]
                break
    legacy = pathlib.Path("/etc/apt/sources.list")
    if legacy.is_file():
        for line in legacy.read_text(errors="replace").splitlines():
            parts = line.split("#", 1)[0].split()
            if not parts or parts[0] != "deb":
                continue
            parts = parts[1:]
            if parts and parts[0].startswith("["):  # [arch=amd64 signed-by=...]
                while parts and not parts[0].endswith("]"):
                    parts.pop(0)
                parts = parts[1:]
            if len(parts) < 2:
                continue
            uri, suite = parts[0], parts[1]
            if suite.endswith("-security") or suite.endswith("/updates"):
                security = security or uri
            elif mirror is None:
                mirror = uri
    return (mirror or DEFAULT_MIRROR).rstrip("/"), (security.rstrip("/") if security else None)


# --------------------------------------------------------------------------- bootstrap


def split_name(name: str) -> tuple[str, str]:
    """'debian:bookworm-slim' -> ('debian', 'bookworm-slim'); 'host:5000/x' -> ('host:5000/x', 'latest')."""
    slash = name.rfind("/")
    colon = name.rfind(":")
    if colon > slash:
        return name[:colon], name[colon + 1 :]
    return name, "latest"


def _image_exists(client, name: str) -> bool:
    import docker.errors  # noqa: PLC0415

    try:
        client.images.get(name)
        return True
    except docker.errors.ImageNotFound:
        return False


def _find_bootstrapped(client, suite: str):
    """An existing image this module built for ``suite``, or None."""
    for img in client.images.list(filters={"label": [f"{BOOTSTRAP_LABEL}=1", f"{SUITE_LABEL}={suite}"]}):
        # labels are inherited by images built FROM a base: only a single-layer import is a base
        if len(img.attrs.get("RootFS", {}).get("Layers", [])) == 1:
            return img
    return None


@contextlib.contextmanager
def _bootstrap_lock() -> Iterator[None]:
    with open(_LOCK_FILE, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _mounts_under(path: str) -> list[str]:
    real = os.path.realpath(path)
    found = []
    with open("/proc/self/mounts", encoding="utf-8") as fh:
        for line in fh:
            target = line.split()[1].replace("\\040", " ")
            if target == real or target.startswith(real + "/"):
                found.append(target)
    return found


def _remove_rootfs(path: str, log: Callable[[str], object]) -> None:
    """Unmount anything debootstrap left mounted, then delete; never delete through a mount."""
    for target in sorted(_mounts_under(path), key=len, reverse=True):
        subprocess.run(["umount", "-l", target], check=False, capture_output=True)
    left = _mounts_under(path)
    if left:
        log(f"bootstrap: NOT removing {path}: still mounted: {', '.join(left)}")
        return
    shutil.rmtree(path, ignore_errors=True)


def _write_apt_sources(rootfs: pathlib.Path, suite: str, mirror: str, security: str | None) -> None:
    signed = (rootfs / ARCHIVE_KEYRING.lstrip("/")).is_file()
    signed_line = f"Signed-By: {ARCHIVE_KEYRING}\n" if signed else ""
    text = f"Types: deb\nURIs: {mirror}\nSuites: {suite} {suite}-updates\nComponents: main\n{signed_line}"
    if security:
        text += f"\nTypes: deb\nURIs: {security}\nSuites: {suite}-security\nComponents: main\n{signed_line}"
    (rootfs / "etc/apt/sources.list.d").mkdir(parents=True, exist_ok=True)
    (rootfs / "etc/apt/sources.list.d/debian.sources").write_text(text)
    with contextlib.suppress(FileNotFoundError):
        (rootfs / "etc/apt/sources.list").unlink()  # debootstrap's one-line list


def _install_host_cas(rootfs: pathlib.Path) -> None:
    """The host's CA bundle (it may hold an egress proxy CA pip needs) plus its local CAs,
    so that a later update-ca-certificates inside the image keeps them."""
    certs = rootfs / "etc/ssl/certs"
    certs.mkdir(parents=True, exist_ok=True)
    if os.path.isfile(HOST_CA_BUNDLE):
        shutil.copyfile(HOST_CA_BUNDLE, certs / "ca-certificates.crt")
    if os.path.isdir(HOST_LOCAL_CA_DIR):
        dest = rootfs / HOST_LOCAL_CA_DIR.lstrip("/")
        dest.mkdir(parents=True, exist_ok=True)
        for crt in pathlib.Path(HOST_LOCAL_CA_DIR).glob("*.crt"):
            shutil.copyfile(crt, dest / crt.name)


def _slim_rootfs(rootfs: pathlib.Path) -> None:
    for pattern in ("var/cache/apt/archives/*.deb", "var/cache/apt/*.bin", "var/lib/apt/lists/*"):
        for p in rootfs.glob(pattern):
            if p.is_file() and p.name != "lock":
                p.unlink()


def _import_rootfs(client, rootfs: pathlib.Path, name: str, suite: str) -> str:
    """tar the rootfs into ``docker import``; return the new image id."""
    repo, tag = split_name(name)
    changes = [
        f"ENV PATH={IMAGE_PATH}",
        # pip inside (also from a venv, i.e. certifi) must trust the copied host bundle.
        f"ENV PIP_CERT={HOST_CA_BUNDLE}",
        f"ENV REQUESTS_CA_BUNDLE={HOST_CA_BUNDLE}",
        f"ENV SSL_CERT_FILE={HOST_CA_BUNDLE}",
        'CMD ["bash"]',
        f"LABEL {BOOTSTRAP_LABEL}=1",
        f"LABEL {SUITE_LABEL}={suite}",
    ]
    tar = subprocess.Popen(
        [
            "tar",
            "-C",
            str(rootfs),
            "--numeric-owner",
            "--xattrs",
            "--exclude=./proc/*",
            "--exclude=./sys/*",
            "--exclude=./dev/*",
            "-c",
            ".",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )

    def chunks() -> Iterator[bytes]:
        assert tar.stdout is not None
        while block := tar.stdout.read(1 << 20):
            yield block

    try:
        resp = client.api.import_image_from_data(chunks(), repository=repo, tag=tag, changes=changes)
    finally:
        if tar.stdout:
            tar.stdout.close()
        err = tar.stderr.read().decode(errors="replace") if tar.stderr else ""
        rc = tar.wait()
    if rc != 0:
        raise RuntimeError(f"tar of {rootfs} failed (rc={rc}): {err.strip()[-500:]}")
    image_id = None
    for line in str(resp).splitlines():
        with contextlib.suppress(ValueError):
            msg = json.loads(line)
            if "error" in msg:
                raise RuntimeError(f"docker import failed: {msg['error']}")
            if str(msg.get("status", "")).startswith("sha256:"):
                image_id = msg["status"]
    return image_id or client.images.get(name).id


def bootstrap_base_images(
    names: list[str],
    *,
    log: Callable[[str], object] = print,
    suite: str = DEFAULT_SUITE,
    reuse: bool = True,
    workdir: str | None = None,
) -> list[str]:
    """Build each named base image that does not exist locally; return the names built.

    One debootstrap rootfs (``suite``, minbase + python3/pip/venv/git/ca-certificates,
    mirror read from the host's apt sources) serves all missing names: it is imported
    once and tagged for each.  With ``reuse`` (default) an image this function built
    earlier for the same suite is simply tagged for new names instead of bootstrapping
    again.  Names that already exist are left alone.  Needs root and a running engine.
    """
    import docker  # noqa: PLC0415

    wanted = list(dict.fromkeys(n.strip() for n in names if n and n.strip()))
    skipped = [n for n in wanted if "@" in n]
    for n in skipped:
        log(f"bootstrap: cannot create digest-pinned image {n}; skipped")
    wanted = [n for n in wanted if "@" not in n]
    if not wanted:
        return []
    client = docker.from_env(timeout=600)
    try:
        if all(_image_exists(client, n) for n in wanted):
            return []
        with _bootstrap_lock():  # concurrent callers (pytest-xdist workers) build once
            missing = [n for n in wanted if not _image_exists(client, n)]
            if not missing:
                return []
            source = _find_bootstrapped(client, suite) if reuse else None
            if source is not None:
                for n in missing:
                    repo, tag = split_name(n)
                    source.tag(repo, tag)
                    log(f"bootstrap: tagged existing {suite} image {source.short_id} as {n}")
                return missing
            image_id = _build_and_import(client, missing[0], suite, log, workdir)
            image = client.images.get(image_id)
            for n in missing[1:]:
                repo, tag = split_name(n)
                image.tag(repo, tag)
                log(f"bootstrap: tagged {image.short_id} as {n}")
            return missing
    finally:
        client.close()


def _build_and_import(client, first_name: str, suite: str, log, workdir: str | None) -> str:
    if os.geteuid() != 0:
        raise RuntimeError("bootstrapping base images needs root (debootstrap)")
    debootstrap = shutil.which("debootstrap")
    if debootstrap is None:
        raise RuntimeError("debootstrap is not installed (apt-get install -y debootstrap)")
    mirror, security = host_apt_mirrors()
    tmp = tempfile.mkdtemp(prefix="swe-residual-rootfs-", dir=workdir)
    rootfs = pathlib.Path(tmp) / "rootfs"
    try:
        t0 = time.monotonic()
        log(f"bootstrap: debootstrap {suite} from {mirror} into {rootfs} (about a minute)")
        proc = subprocess.run(
            [
                debootstrap,
                "--variant=minbase",
                f"--include={DEBOOTSTRAP_INCLUDE}",
                suite,
                str(rootfs),
                mirror,
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
        )
        if proc.returncode != 0:
            tail = "\n".join(proc.stdout.splitlines()[-20:])
            debootstrap_log = rootfs / "debootstrap/debootstrap.log"
            if debootstrap_log.is_file():
                tail += "\n--- debootstrap.log ---\n" + _log_tail(str(debootstrap_log))
            raise RuntimeError(f"debootstrap failed (rc={proc.returncode}):\n{tail}")
        log(f"bootstrap: debootstrap done in {time.monotonic() - t0:.0f} s")
        _install_host_cas(rootfs)
        _write_apt_sources(rootfs, suite, mirror, security)
        _slim_rootfs(rootfs)
        t1 = time.monotonic()
        image_id = _import_rootfs(client, rootfs, first_name, suite)
        log(f"bootstrap: imported {first_name} ({image_id[:19]}) in {time.monotonic() - t1:.0f} s")
        return image_id
    finally:
        _remove_rootfs(tmp, log)


# --------------------------------------------------------------------------- Dockerfiles

_VAR_RE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)(?:(:[-+])([^}]*))?\}|([A-Za-z_][A-Za-z0-9_]*))")


def _logical_lines(text: str) -> Iterator[str]:
    """Dockerfile instructions with comments dropped and backslash continuations joined."""
    buf = ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if stripped.startswith("#") and not buf:
            continue  # comments / parser directives
        if stripped.startswith("#"):
            continue  # comment lines inside a continuation are skipped by Docker too
        if stripped.endswith("\\"):
            buf += stripped[:-1] + " "
            continue
        buf += stripped
        if buf.strip():
            yield buf.strip()
        buf = ""
    if buf.strip():
        yield buf.strip()


def _substitute(value: str, args: dict[str, str]) -> str | None:
    """Expand $VAR / ${VAR} / ${VAR:-default} from global ARGs; None if something stays unknown."""
    unknown = False

    def repl(m: re.Match) -> str:
        nonlocal unknown
        name, op, word = m.group(1) or m.group(4), m.group(2), m.group(3) or ""
        value = args.get(name, "")
        if op == ":-":
            return value or word
        if op == ":+":
            return word if value else ""
        if name in args:
            return value
        unknown = True
        return m.group(0)

    out = _VAR_RE.sub(repl, value)
    return None if unknown else out


def base_images_of(dockerfiles: list[pathlib.Path]) -> list[str]:
    """Distinct external images named by ``FROM`` lines, in first-seen order.

    Build-stage aliases (``FROM builder``) and ``scratch`` are ignored; ``--platform``
    flags are dropped; ``$ARG`` references are expanded from ARGs declared before the
    first FROM (with their defaults); an image that still has an unknown variable is skipped.
    """
    seen: dict[str, None] = {}
    for path in dockerfiles:
        text = pathlib.Path(path).read_text(errors="replace")
        stages: set[str] = set()
        global_args: dict[str, str] = {}
        in_preamble = True
        for line in _logical_lines(text):
            parts = line.split()
            instr = parts[0].upper()
            if instr == "ARG" and in_preamble:
                for decl in parts[1:]:
                    key, _, default = decl.partition("=")
                    global_args[key] = default.strip("\"'")
                continue
            if instr != "FROM":
                continue
            in_preamble = False
            words = [w for w in parts[1:] if not w.startswith("--")]
            if not words:
                continue
            image = _substitute(words[0], global_args)
            if image and image.lower() != "scratch" and image.lower() not in stages:
                seen.setdefault(image, None)
            if len(words) >= 3 and words[1].upper() == "AS":
                stages.add(words[2].lower())
    return list(seen)

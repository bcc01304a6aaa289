"""`swe-residual export harbor`: a track's starts as Harbor task dirs.

Harbor runs Harbor-format tasks on many sandbox providers (Docker, Modal, Daytona, E2B, Runloop,
...). Exporting every (task, start) of a track as its own task dir lets it run our cases at scale.
Every exported dir targets the task schema of one Harbor release (HARBOR_VERSION, task schema
HARBOR_TASK_SCHEMA; CI runs the exported demo track through that release's own Trial API):

* task.toml: the task's text with `schema_version` set to HARBOR_TASK_SCHEMA and the fields that
  schema deprecated rewritten (`version`, `[environment] memory` / `storage` / `allow_internet`);
  a task written for a newer schema is refused.
* tests/: a verifier that writes JUnit XML but no CTRF gets a `test.sh` that runs the task's own
  (kept byte for byte as `tests/.swe-residual/test.sh`), then converts the JUnit XML it wrote into
  `/logs/verifier/ctrf.json` (junit_to_ctrf.py), so the per-test results reach Harbor's trial dir
  and `swe-residual import harbor-job`. A verifier that writes CTRF itself is left alone.
* clean start: otherwise the task dir, copied unchanged.
* residual start: the same task, but its environment starts from the Residual State. Its
  `environment/Dockerfile` builds the clean environment, then applies the state's patch with the
  harness's own script (scripts/apply_patch.sh) *without a commit*: git status and git diff show
  the inherited work and HEAD stays the base commit, exactly as our backends materialize it.
  A task whose clean environment is a prebuilt image (`[environment] docker_image`, DeepSWE) gets
  `FROM <that image>`; otherwise the clean environment dir (the build context) is copied and the
  steps are appended to its Dockerfile. The patch and script travel in the build context under
  `.swe-residual/` and are deleted from the image after use.

  The reference solution is written for the clean start, so a residual start's `solution/solve.sh`
  first undoes the inherited work (as our oracle discards it before applying the reference: here
  the state's patch reverse-applied, which restores exactly the clean environment; our oracle's
  `git reset --hard` + `git clean -fdx` if that fails), then runs the task's own solve.sh (kept
  byte for byte as `solution/.swe-residual/solve.sh`). Machine tasks keep theirs (as our oracle).

  Harbor uses `docker_image` instead of building the Dockerfile whenever it is set, so the
  residual task.toml drops that key; a `[task] name` (Harbor's task name when present) is renamed
  to the exported dir's name so every start has its own name in Harbor's results. Everything else
  in task.toml stays as written, plus a `[metadata.swe_residual]` table with the case's identity
  and provenance. instruction.md is unchanged.

`export.json` in the output dir lists every exported dir with its identity; it is what maps
Harbor's results back to (track, task, start, state). It also names the Harbor release and task
schema the export targets.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
import shutil
import stat
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path

from swe_residual import __version__
from swe_residual.agents.builtin import DISCARD
from swe_residual.backends.workspace import SCRIPTS
from swe_residual.errors import InputError
from swe_residual.progress import Progress
from swe_residual.states import LoadedState, load_states
from swe_residual.tasks import Task, load_tasks

EXPORT_FORMAT = "swe-residual-harbor-export-1"
# The Harbor release exported tasks target, and the task schema (TaskConfig.schema_version) it
# writes. tests/test_harbor_trial.py runs the exported demo track through this release's Trial
# API, tests/test_export_harbor.py loads and lints every exported dir with it (CI installs
# harbor==HARBOR_VERSION from PyPI); change the three together.
HARBOR_VERSION = "0.26.0"
HARBOR_TASK_SCHEMA = "1.4"
CHECKED_BY = [
    "tests/test_export_harbor.py: harbor.models.task.task.Task loads every exported dir; harbor lint",
    "tests/test_harbor_trial.py: harbor.trial.trial.Trial runs every exported demo dir (oracle, nop)",
]
JUNIT_TO_CTRF = Path(__file__).with_name("junit_to_ctrf.py")  # copied into tests/.swe-residual/
METADATA_KEY = "swe_residual"  # [metadata.swe_residual] in a residual task.toml
STATE_DIR = ".swe-residual"  # in the residual build context
IN_IMAGE = "/tmp/.swe-residual-state"  # where the build copies it (removed after applying)
TASK_COPY_LIMIT = 4 << 30  # bytes per task dir
PATCH_LIMIT = 64 << 20  # bytes per state patch
NAME_MAX = 100
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*$")  # Harbor names: lowercase, no "..", usable as image names
STARTS = ("clean", "residual", "both")


@dataclass
class ExportedTask:
    """One exported task dir (an entry of export.json)."""

    name: str  # the dir name under the output dir
    harbor_name: str  # what Harbor reports as task_name: [task] name, else the dir name
    track: str
    task: str
    start: str  # clean | residual
    source: str  # the task's dir name in the track's tasks dir
    state_id: str | None = None
    predecessor: dict[str, str] | None = None
    state_patch_sha256: str | None = None
    failing_tests: list[str] = field(default_factory=list)
    from_image: str | None = None  # residual: the prebuilt image its Dockerfile starts FROM
    ctrf: str | None = None  # task: its verifier writes ctrf.json; junit: the export converts its
    # JUnit XML; None: no per-test report reaches Harbor's trial dir
    solution: str = "reference"  # reference: solution/ as the task has it; undo-state-then-reference:
    # solve.sh reverse-applies the state, then runs the task's own


# -- names ------------------------------------------------------------------------------------
def harbor_slug(text: str) -> str:
    """A valid Harbor task / Docker image name component made from an id."""
    s = re.sub(r"[^a-z0-9._-]+", "-", text.lower())
    s = re.sub(r"\.{2,}", ".", s).strip("-._")
    if not s:
        s = "task-" + hashlib.sha256(text.encode()).hexdigest()[:8]
    if len(s) > NAME_MAX:
        s = s[: NAME_MAX - 9].rstrip("-._") + "-" + hashlib.sha256(text.encode()).hexdigest()[:8]
    return s


def _unique(name: str, taken: set[str], identity: str) -> str:
    if name in taken:
        name = f"{name[: NAME_MAX - 9].rstrip('-._')}-{hashlib.sha256(identity.encode()).hexdigest()[:8]}"
    if name in taken or not NAME_RE.match(name):
        raise InputError(f"export: cannot make a unique Harbor task name for {identity} (got {name!r})")
    taken.add(name)
    return name


def residual_name(task: Task, state: LoadedState) -> str:
    """<task>--<what the state is>; a state id that already starts with '<task>--' is used as is."""
    t, s = harbor_slug(task.id), harbor_slug(state.id)
    return s if s.startswith(t + "--") else harbor_slug(f"{task.id}--{state.id}")


# -- copying ----------------------------------------------------------------------------------
def copy_task_tree(
    src: Path, dest: Path, *, limit: int = TASK_COPY_LIMIT, skip: tuple[str, ...] = ()
) -> None:
    """Copy a task dir without trusting it: regular files (mode kept) and dirs; a symlink is kept
    only when it is relative and stays inside src, else it is an error; fifos and devices too.
    `skip` are top-level names not copied."""
    src, total = src.resolve(), 0
    dest.mkdir(parents=True, exist_ok=False)
    for dirpath, dirnames, filenames in os.walk(src, followlinks=False):
        here = Path(dirpath)
        rel_dir = here.relative_to(src)
        if rel_dir == Path("."):
            dirnames[:] = [d for d in dirnames if d not in skip]
            filenames = [f for f in filenames if f not in skip]
        dirnames.sort()
        for name in list(dirnames):
            if os.path.islink(here / name):
                filenames.append(name)  # a symlink to a dir: handled (checked) as a link
                dirnames.remove(name)
            else:
                (dest / rel_dir / name).mkdir()
        for name in sorted(filenames):
            path, target = here / name, dest / rel_dir / name
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                link = os.readlink(path)
                resolved = (path.parent / link).resolve()
                if os.path.isabs(link) or (resolved != src and src not in resolved.parents):
                    raise InputError(
                        f"{path}: symlink to {link} leaves the task dir {src}; export copies no "
                        "files from outside a task (replace the link by the file)"
                    )
                os.symlink(link, target)
                continue
            if not stat.S_ISREG(st.st_mode):
                raise InputError(f"{path}: not a regular file, dir or symlink; remove it from the task dir")
            total += st.st_size
            if total > limit:
                raise InputError(
                    f"{src}: task dir holds more than {limit >> 20} MiB; export stopped at {path}"
                )
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
            with os.fdopen(fd, "rb") as fh, open(target, "wb") as out:
                shutil.copyfileobj(fh, out)
            os.chmod(target, stat.S_IMODE(st.st_mode))


# -- task.toml --------------------------------------------------------------------------------
def toml_str(value: str) -> str:
    """A TOML basic string (escapes quotes, backslashes and every control character)."""
    out = []
    for ch in value:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append({"\n": "\\n", "\t": "\\t", "\r": "\\r"}.get(ch, f"\\u{ord(ch):04x}"))
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _toml_value(value: object) -> str:
    if isinstance(value, str):
        return toml_str(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(type(value))


def _table_of(line: str) -> str | None:
    """The table a header line opens (`[a.b]` -> 'a.b', `[[a]]` -> 'a'), None for other lines."""
    m = re.match(r"^\s*\[\[?\s*([A-Za-z0-9_.\-\s\"']+?)\s*\]\]?\s*(#.*)?$", line)
    return re.sub(r"\s*\.\s*", ".", m.group(1)).replace('"', "").replace("'", "") if m else None


def rewrite_task_toml(
    text: str, path: Path, *, metadata: dict[str, object], new_name: str | None, drop_docker_image: bool
) -> str:
    """task.toml of a residual start: the original text with `[task] name` replaced, the
    `[environment] docker_image` line commented out and `[metadata.swe_residual]` appended.
    The result is parsed again and must equal the original data with exactly these changes."""
    original = tomllib.loads(text)
    if METADATA_KEY in (original.get("metadata") or {}):
        raise InputError(
            f"{path}: metadata.{METADATA_KEY}: already set (an exported task?); export from the "
            "track's own tasks"
        )
    lines, table = text.splitlines(keepends=True), ""
    for i, line in enumerate(lines):
        header = _table_of(line)
        if header is not None:
            table = header
            continue
        if new_name is not None and table == "task" and re.match(r"^\s*name\s*=", line):
            lines[i] = (
                f"name = {toml_str(new_name)}  # was {toml_str(original['task']['name'])}; renamed by swe-residual export\n"
            )
        elif drop_docker_image and table == "environment" and re.match(r"^\s*docker_image\s*=", line):
            lines[i] = (
                "# swe-residual export: docker_image removed, so Harbor builds environment/Dockerfile "
                "(the prebuilt clean image + the Residual State)\n# " + line.rstrip("\n") + "\n"
            )
    out = "".join(lines)
    if out and not out.endswith("\n"):
        out += "\n"
    out += "\n# Case identity and provenance, written by swe-residual export harbor\n"
    out += f"[metadata.{METADATA_KEY}]\n"
    out += "".join(f"{k} = {_toml_value(v)}\n" for k, v in metadata.items())
    expected = copy.deepcopy(original)
    if new_name is not None:
        expected["task"]["name"] = new_name
    if drop_docker_image:
        expected["environment"].pop("docker_image", None)
    expected.setdefault("metadata", {})[METADATA_KEY] = metadata
    try:
        got = tomllib.loads(out)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(
            f"{path}: cannot add [metadata.{METADATA_KEY}] ({exc}); write [metadata] as a "
            "table, not an inline table"
        ) from None
    if got != expected:
        raise InputError(
            f"{path}: could not rewrite it for a residual start (write [task] name and "
            "[environment] docker_image as plain `key = value` lines of their tables)"
        )
    return out


SCHEMA_RE = re.compile(r"^\d+(\.\d+)*$")
JUNIT_NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*\.xml")  # as tasks.py accepts them
SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([GMK])\s*$", re.IGNORECASE)
ENV_TABLES = ("environment", "verifier.environment")  # tables with EnvironmentConfig's fields


def _schema_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in version.split("."))


def _size_mb(value: object, where: str) -> int:
    """Harbor's reading of the deprecated `memory` / `storage` strings ("2G", "512M", "1024K")."""
    m = SIZE_RE.match(value) if isinstance(value, str) else None
    if m is None:
        raise InputError(
            f"{where}: {value!r} is not a size like '2G' or '512M'; write the *_mb field instead"
        )
    number, unit = float(m.group(1)), m.group(2).upper()
    return int(number * 1024) if unit == "G" else int(number) if unit == "M" else int(number / 1024)


def _migrate_env_table(data: dict, where: str) -> dict[str, tuple[str, str | None]]:
    """Rewrite a table's deprecated EnvironmentConfig fields in `data` (in place); returns
    {old key: (its line's replacement, or None to comment it out)}."""
    edits: dict[str, tuple[str, str | None]] = {}
    for old, new in (("memory", "memory_mb"), ("storage", "storage_mb")):
        if old not in data:
            continue
        mb = _size_mb(data[old], f"{where}.{old}")
        if new in data and data[new] != mb:
            raise InputError(f"{where}: {old} = {data[old]!r} ({mb} MB) contradicts {new} = {data[new]!r}")
        edits[old] = (new, None if new in data else f"{new} = {mb}")
        data.pop(old)
        data[new] = mb
    if "allow_internet" in data:
        allow = data.pop("allow_internet")
        if not isinstance(allow, bool):
            raise InputError(f"{where}.allow_internet: {allow!r} is not true or false")
        if "network_mode" in data or "allowed_hosts" in data:  # Harbor ignores it then
            edits["allow_internet"] = ("network_mode", None)
        else:
            mode = "public" if allow else "no-network"
            data["network_mode"] = mode
            edits["allow_internet"] = ("network_mode", f"network_mode = {toml_str(mode)}")
    return edits


def target_schema(text: str, path: Path) -> str:
    """task.toml in Harbor HARBOR_VERSION's task schema: `schema_version = HARBOR_TASK_SCHEMA`
    (the old marker, `schema_version` or the deprecated `version`, replaced; inserted at the top
    when there is none) and the fields that schema deprecated in [environment] and
    [verifier.environment] rewritten as Harbor reads them (memory / storage -> memory_mb /
    storage_mb, allow_internet -> network_mode). A task of a newer schema is refused. The result
    is parsed again and must equal the original data with exactly these changes."""
    original = tomllib.loads(text)
    declared = original.get("schema_version", original.get("version"))
    if declared is not None and (not isinstance(declared, str) or not SCHEMA_RE.match(declared)):
        raise InputError(f'{path}: schema_version: {declared!r} is not a version like "{HARBOR_TASK_SCHEMA}"')
    if declared is not None and _schema_tuple(declared) > _schema_tuple(HARBOR_TASK_SCHEMA):
        raise InputError(
            f"{path}: schema_version {declared} is newer than the task schema of Harbor {HARBOR_VERSION} "
            f"({HARBOR_TASK_SCHEMA}), which this export targets; export with a swe-residual that "
            "targets a newer Harbor"
        )
    expected = copy.deepcopy(original)
    expected.pop("version", None)
    expected["schema_version"] = HARBOR_TASK_SCHEMA
    edits: dict[str, dict[str, tuple[str, str | None]]] = {}
    for name in ENV_TABLES:
        table: object = expected
        for part in name.split("."):
            table = table.get(part) if isinstance(table, dict) else None
        if isinstance(table, dict):
            edits[name] = _migrate_env_table(table, f"{path}: {name}")
    note = f"  # was {{}}; swe-residual export targets Harbor {HARBOR_VERSION}"
    lines, table_name, marked = text.splitlines(keepends=True), "", False
    for i, line in enumerate(lines):
        header = _table_of(line)
        if header is not None:
            table_name = header
            continue
        if table_name == "" and re.match(r"^\s*(schema_version|version)\s*=", line):
            lines[i] = (
                f"# swe-residual export: a second schema marker\n# {line.rstrip()}\n"
                if marked
                else f"schema_version = {toml_str(HARBOR_TASK_SCHEMA)}"
                + note.format(line.split("#")[0].strip())
                + "\n"
            )
            marked = True
            continue
        for old, (new, replacement) in edits.get(table_name, {}).items():
            if re.match(rf"^\s*{old}\s*=", line):
                was = line.rstrip("\n")
                lines[i] = (
                    (replacement + note.format(was.strip()) + "\n")
                    if replacement
                    else f"# swe-residual export: {old} is deprecated in Harbor {HARBOR_VERSION} ({new} is set)\n# {was}\n"
                )
    out = "".join(lines)
    if not marked:
        out = (
            f"schema_version = {toml_str(HARBOR_TASK_SCHEMA)}  # set by swe-residual export (Harbor {HARBOR_VERSION})\n"
            + out
        )
    if out and not out.endswith("\n"):
        out += "\n"
    try:
        got = tomllib.loads(out)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{path}: cannot set schema_version {HARBOR_TASK_SCHEMA} ({exc})") from None
    if got != expected:
        raise InputError(
            f"{path}: could not rewrite it for Harbor {HARBOR_VERSION}'s task schema {HARBOR_TASK_SCHEMA} "
            "(write schema_version and the [environment] fields as plain `key = value` lines)"
        )
    return out


# -- the verifier's per-test report, the residual reference solution ---------------------------
def _run_moved(var: str, *, exec_: bool = False) -> str:
    """Shell lines running the task's own script at $var as Harbor runs it (made executable, run by
    its shebang; with bash when it cannot be made executable)."""
    run = "exec " if exec_ else ""
    return (
        f'[ -x "${var}" ] || chmod +x "${var}" 2>/dev/null\n'
        f'if [ -x "${var}" ]; then {run}"${var}" "$@"; else {run}bash "${var}" "$@"; fi\n'
    )


def ctrf_test_sh(junit_names: tuple[str, ...]) -> str:
    """tests/test.sh of an exported task whose verifier writes JUnit XML (junit_names: the files
    in the logs dir our grading reads, Task.junit_reports; plain file names, quoted as they are)."""
    names = " ".join(f"'{n}'" for n in junit_names)
    return (
        """#!/bin/bash
# Written by swe-residual export harbor. Runs the task's own verifier (.swe-residual/test.sh, the
# task's tests/test.sh byte for byte), then turns the JUnit XML it wrote into ctrf.json next to
# the reward file (.swe-residual/junit_to_ctrf.py), so Harbor's trial dir keeps the per-test
# results. Exits with the verifier's exit status; Harbor's reward is the verifier's reward file.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
logs="${LOGS_DIR:-/logs/verifier}"
mkdir -p "$logs"
# reports already there were not written by this verifier (e.g. planted during the agent's turn)
"""
        + f'(cd "$logs" && rm -rf -- {names} ctrf.json)\n'
        + """verifier="$here/.swe-residual/test.sh"
"""
        + _run_moved("verifier")
        + """status=$?
if command -v python3 >/dev/null 2>&1; then
"""
        + f'  python3 -I "$here/.swe-residual/junit_to_ctrf.py" "$logs" {names} || true\n'
        + """else
  echo "swe-residual: python3 not found; no ctrf.json (Harbor keeps only the reward)" >&2
fi
exit "$status"
"""
    )


def _harborignore_keeps(dir_: Path) -> None:
    """A .harborignore of the dir must not drop the export's own files."""
    ignore = dir_ / ".harborignore"
    if ignore.is_file():
        text = ignore.read_text(encoding="utf-8").rstrip("\n")
        ignore.write_text(
            f"{text}\n# swe-residual export: its own files must reach the environment\n"
            f"!{STATE_DIR}\n!{STATE_DIR}/**\n",
            encoding="utf-8",
        )


def _move_aside(dir_: Path, script: str) -> Path:
    """dir/script -> dir/.swe-residual/script (mode kept); returns the .swe-residual dir."""
    own = dir_ / STATE_DIR
    if own.exists() or own.is_symlink():
        raise InputError(f"{own}: name reserved for the export's own files; rename it")
    if (dir_ / script).is_symlink() or not (dir_ / script).is_file():
        raise InputError(
            f"{dir_ / script}: not a regular file (a symlink is not wrapped); replace the link by the file"
        )
    own.mkdir()
    os.replace(dir_ / script, own / script)
    return own


def _write_script(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")
    os.chmod(path, 0o755)


def ctrf_mode(task: Task) -> str | None:
    """How per-test results reach Harbor's trial dir: `task` (its verifier writes ctrf.json),
    `junit` (it writes JUnit XML, the export adds the conversion), None (neither, or a separate
    verifier whose image owns /tests: nothing is changed there)."""
    if "ctrf" in task.reports:
        return "task"
    if "junit" not in task.reports or task.config.verifier.environment_mode == "separate":
        return None
    return "junit"


def write_ctrf_verifier(task: Task, tests_dest: Path) -> None:
    """tests/test.sh -> tests/.swe-residual/test.sh, wrapped by one that writes ctrf.json from the
    JUnit files the task declares."""
    names = task.junit_reports
    if not all(JUNIT_NAME_RE.fullmatch(n) for n in names):
        raise InputError(
            f"{task.path / 'task.toml'}: verifier.junit_reports: {names!r}: plain file names only"
        )
    own = _move_aside(tests_dest, "test.sh")
    shutil.copyfile(JUNIT_TO_CTRF, own / "junit_to_ctrf.py")
    _write_script(tests_dest / "test.sh", ctrf_test_sh(names))
    _harborignore_keeps(tests_dest)


def residual_solve_script(state: LoadedState) -> str:
    """solution/solve.sh of a residual start: undo the state, then the task's own solve.sh."""
    return f"""#!/bin/bash
# Written by swe-residual export harbor. This task starts from Residual State {_comment(state.id)}:
# inherited changes, uncommitted, in the repository. The task's reference solution
# (.swe-residual/solve.sh, its solution/solve.sh byte for byte) is written for the clean start,
# so the inherited work is discarded first, as swe-residual's oracle does: the state's patch
# (.swe-residual/state.patch) is reverse-applied, which restores exactly the clean environment;
# if that fails, everything uncommitted is discarded ({DISCARD}).
here=$(cd "$(dirname "${{BASH_SOURCE[0]}}")" && pwd)
app="${{APP_DIR:-/app}}"
g() {{ git -c safe.directory='*' -C "$app" "$@"; }}
if ! g apply -R --binary --whitespace=nowarn "$here/{STATE_DIR}/state.patch"; then
  echo "swe-residual: the inherited changes do not reverse-apply; discarding all uncommitted work" >&2
  g reset -q --hard HEAD && g clean -q -fdx || exit 3
fi
reference="$here/{STATE_DIR}/solve.sh"
""" + _run_moved("reference", exec_=True)


def write_residual_solution(task: Task, state: LoadedState, sol_dest: Path) -> str:
    """The residual start's solution/; returns the export.json `solution` value."""
    if task.kind == "machine" or not (sol_dest / "solve.sh").exists():
        return "reference"  # a machine task's solve.sh copes with the state (as for our oracle)
    own = _move_aside(sol_dest, "solve.sh")
    shutil.copyfile(state.patch_path, own / "state.patch")
    _write_script(sol_dest / "solve.sh", residual_solve_script(state))
    _harborignore_keeps(sol_dest)
    return "undo-state-then-reference"


# -- the residual environment -----------------------------------------------------------------
IMAGE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@+-]*$")
COMMIT_RE = re.compile(r"^[0-9a-f]{7,64}$")


def _comment(text: str) -> str:
    """Text safe inside a one-line Dockerfile or shell comment."""
    return re.sub(r"[^\x20-\x7e]", "?", text)


def apply_state_script(state: LoadedState, base_commit: str | None) -> str:
    """The build step: scripts/apply_patch.sh on /app, then the state files are removed."""
    return f"""#!/bin/sh
# Written by swe-residual export harbor: applies Residual State {state.id} to /app without a
# commit (git status and git diff show the inherited work; HEAD stays the base commit).
set -eu
d={IN_IMAGE}
base='{base_commit or ""}'
[ -n "$base" ] || base=$(git -c safe.directory='*' -C /app rev-parse HEAD)
SWE_PATCH="$d/state.patch" SWE_BASE="$base" SWE_APP=/app sh "$d/apply_patch.sh"
rm -rf "$d" 2>/dev/null || true
"""


def _last_logical_line_continues(dockerfile: str) -> bool:
    lines = [ln for ln in dockerfile.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    return bool(lines) and lines[-1].rstrip().endswith("\\")


def write_residual_environment(task: Task, state: LoadedState, env_dest: Path) -> str | None:
    """The residual start's environment dir; returns the prebuilt image it starts FROM, if any."""
    env_src, cfg = task.environment_dir, task.config
    toml_path = task.path / "task.toml"
    if str((cfg.environment.model_extra or {}).get("os", "linux")).lower() != "linux":
        raise InputError(f"{toml_path}: environment.os: residual starts are exported for linux tasks only")
    if (env_src / "docker-compose.yaml").exists():
        raise InputError(
            f"{env_src / 'docker-compose.yaml'}: compose environments are not exported (the state "
            "is applied in environment/Dockerfile)"
        )
    if cfg.verifier.environment_mode == "separate" and not (task.tests_dir / "Dockerfile").is_file():
        venv = (cfg.verifier.model_extra or {}).get("environment") or {}
        if not (isinstance(venv, dict) and venv.get("docker_image")):
            raise InputError(
                f"{toml_path}: verifier.environment_mode: a separate verifier without tests/Dockerfile "
                "would build from environment/, i.e. from the Residual State; add tests/Dockerfile"
            )
    patch = state.patch_path
    if patch.stat().st_size > PATCH_LIMIT:
        raise InputError(f"{patch}: state patch over {PATCH_LIMIT >> 20} MiB")
    image, base = cfg.environment.docker_image, cfg.metadata.base_commit_hash
    if image is not None and not IMAGE_RE.match(image):
        raise InputError(f"{toml_path}: environment.docker_image: {image!r} is not an image reference")
    if base is not None and not COMMIT_RE.match(base):
        raise InputError(
            f"{toml_path}: metadata.base_commit_hash: {base!r} is not a commit hash (lowercase hex)"
        )
    if image:
        env_dest.mkdir(parents=True)
        dockerfile = f"FROM {image}\n"
    else:
        if not (env_src / "Dockerfile").is_file():
            raise InputError(
                f"{toml_path}: environment: neither [environment] docker_image nor "
                f"{env_src / 'Dockerfile'} exists"
            )
        copy_task_tree(env_src, env_dest)
        if (env_dest / STATE_DIR).exists():
            raise InputError(f"{env_src / STATE_DIR}: name reserved for the exported state; rename it")
        dockerfile = (env_dest / "Dockerfile").read_text(encoding="utf-8")
        if _last_logical_line_continues(dockerfile):
            raise InputError(f"{env_src / 'Dockerfile'}: the last instruction ends with a line continuation")
        dockerfile = dockerfile.rstrip("\n") + "\n"
        ignore = env_dest / ".dockerignore"
        if ignore.is_file():  # keep the state in the build context whatever the task excludes
            text = ignore.read_text(encoding="utf-8").rstrip("\n")
            ignore.write_text(
                f"{text}\n# swe-residual export: the Residual State must reach the build\n"
                f"!{STATE_DIR}\n!{STATE_DIR}/**\n",
                encoding="utf-8",
            )
    state_dir = env_dest / STATE_DIR
    state_dir.mkdir()
    shutil.copyfile(patch, state_dir / "state.patch")
    shutil.copyfile(SCRIPTS / "apply_patch.sh", state_dir / "apply_patch.sh")
    (state_dir / "apply-state.sh").write_text(apply_state_script(state, base), encoding="utf-8")
    dockerfile += (
        f"\n# --- swe-residual: Residual State {state.id} of task {_comment(task.id)} (track {task.track}), "
        "applied without a commit ---\n"
        f"COPY {STATE_DIR} {IN_IMAGE}\n"
        f'RUN ["/bin/sh", "{IN_IMAGE}/apply-state.sh"]\n'
    )
    (env_dest / "Dockerfile").write_text(dockerfile, encoding="utf-8")
    return image


# -- export -----------------------------------------------------------------------------------
def _harbor_name(task: Task, dir_name: str, renamed: bool) -> str:
    package = (task.config.model_extra or {}).get("task")
    if isinstance(package, dict) and isinstance(package.get("name"), str):
        org = package["name"].split("/", 1)[0]
        return f"{org}/{dir_name}" if renamed else package["name"]
    return dir_name


def export_tasks(
    tasks: dict[str, Task],
    states: list[LoadedState],
    out: Path,
    *,
    track: str,
    start: str = "both",
    progress: Progress | None = None,
) -> list[ExportedTask]:
    """Write one Harbor task dir per (task, start) into out (which must not exist) and export.json;
    `progress` counts the task dirs written."""
    if start not in STARTS:
        raise InputError(f"--start {start}: one of {', '.join(STARTS)}")
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise InputError(f"--out {out}: exists and is not an empty dir; choose a new one")
    tmp = out.parent / f".{out.name}.export-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    taken: set[str] = set()
    exported: list[ExportedTask] = []
    try:
        for task in sorted(tasks.values(), key=lambda t: t.id):
            if start in ("clean", "both"):
                name = _unique(harbor_slug(task.id), taken, f"task {task.id} (clean)")
                copy_task_tree(task.path, tmp / name, skip=("task.toml",))
                toml_path = task.path / "task.toml"
                (tmp / name / "task.toml").write_text(
                    target_schema(toml_path.read_text(encoding="utf-8"), toml_path), encoding="utf-8"
                )
                ctrf = _per_test_report(task, tmp / name)
                exported.append(
                    ExportedTask(
                        name=name,
                        harbor_name=_harbor_name(task, name, False),
                        track=track,
                        task=task.id,
                        start="clean",
                        source=task.path.name,
                        ctrf=ctrf,
                    )
                )
                if progress is not None:
                    progress.advance()
            if start in ("residual", "both"):
                for state in (s for s in states if s.task == task.id and s.track == track):
                    exported.append(_export_residual(task, state, tmp, taken, track))
                    if progress is not None:
                        progress.advance()
        names = [e.harbor_name for e in exported]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise InputError(
                f"export: Harbor task name(s) {', '.join(dup)} repeat; give the tasks distinct [task] names"
            )
        index = {
            "format": EXPORT_FORMAT,
            "exporter": f"swe-residual {__version__}",
            "harbor": {
                "version": HARBOR_VERSION,
                "task_schema": HARBOR_TASK_SCHEMA,
                "checked_by": CHECKED_BY,
            },
            "track": track,
            "start": start,
            "n_tasks": len(exported),
            "tasks": [asdict(e) for e in exported],
        }
        (tmp / "export.json").write_text(json.dumps(index, indent=1) + "\n", encoding="utf-8")
        if out.exists():
            out.rmdir()
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return exported


def _export_residual(task: Task, state: LoadedState, tmp: Path, taken: set[str], track: str) -> ExportedTask:
    name = _unique(residual_name(task, state), taken, f"state {state.id}")
    dest = tmp / name
    copy_task_tree(task.path, dest, skip=("environment", "task.toml"))
    image = write_residual_environment(task, state, dest / "environment")
    entry = ExportedTask(
        name=name,
        harbor_name="",
        track=track,
        task=task.id,
        start="residual",
        source=task.path.name,
        state_id=state.id,
        predecessor={"agent": state.predecessor.agent, "model_family": state.predecessor.model_family},
        state_patch_sha256=state.artifact.sha256,
        failing_tests=list(state.initial_verdict.failing_tests),
        from_image=image,
    )
    package = (task.config.model_extra or {}).get("task")
    renamed = isinstance(package, dict) and isinstance(package.get("name"), str)
    entry.harbor_name = _harbor_name(task, name, renamed)
    metadata: dict[str, object] = {
        "format": EXPORT_FORMAT,
        "track": track,
        "task": task.id,
        "start": "residual",
        "state_id": state.id,
        "predecessor_agent": state.predecessor.agent,
        "predecessor_model_family": state.predecessor.model_family,
        "state_patch_sha256": state.artifact.sha256,
        "failing_tests": entry.failing_tests,
    }
    toml_path = task.path / "task.toml"
    text = rewrite_task_toml(
        toml_path.read_text(encoding="utf-8"),
        toml_path,
        metadata=metadata,
        new_name=entry.harbor_name if renamed else None,
        drop_docker_image=bool(image),
    )
    (dest / "task.toml").write_text(target_schema(text, toml_path), encoding="utf-8")
    entry.ctrf = _per_test_report(task, dest)
    entry.solution = write_residual_solution(task, state, dest / "solution")
    return entry


def _per_test_report(task: Task, dest: Path) -> str | None:
    mode = ctrf_mode(task)
    if mode == "junit":
        write_ctrf_verifier(task, dest / "tests")
    return mode


def export_track(
    track: str, out: Path, *, states_path: Path, tasks_dir: str | None = None, start: str = "both"
) -> list[ExportedTask]:
    """Export a track's tasks (resolved like a run: --tasks-dir, bundled, fetched) and its states."""
    from swe_residual.run.plan import no_states_reason, no_tasks_reason
    from swe_residual.tracks import suite_dir, tasks_dir_for

    suite = suite_dir(track)
    tdir = tasks_dir_for(suite, tasks_dir)
    if tdir is None:
        raise InputError(no_tasks_reason(suite))
    tasks = load_tasks(tdir, track)
    states = load_states(Path(states_path), {track: tasks}, tracks={track}) if start != "clean" else []
    if start == "residual" and not [s for s in states if s.track == track]:
        raise InputError(no_states_reason(suite, Path(states_path), []))  # load_states left none out
    n = (len(tasks) if start != "residual" else 0) + sum(
        1 for s in states if s.track == track and s.task in tasks
    )
    progress = Progress(n, "task dirs", label="export")
    try:
        exported = export_tasks(tasks, states, Path(out), track=track, start=start, progress=progress)
    except BaseException:
        progress.abandon()  # the error is the last word, not a count
        raise
    progress.close()
    return exported

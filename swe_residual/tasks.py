"""Harbor-format task directories: instruction.md, task.toml, environment/, tests/, solution/.

task.toml is parsed into pydantic models that keep unknown fields (Harbor and DeepSWE add their
own), so a task round-trips unchanged. Errors name the file and the field in one line.

A task's `kind` comes from its track (suites/<track>/track.toml): a repository task's state is
its repository, a machine task's state is the whole container. `verify_mode` is the one place
that decides where its verifier runs (swe_residual/run/verifier.py).
"""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from swe_residual.errors import InputError
from swe_residual.patches import patch_files
from swe_residual.tracks import KINDS


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class MetadataConfig(_Open):
    task_id: str | None = None
    language: str | None = None
    category: str | None = None
    # Repository tasks: either a repository shipped in the task (plain files turned into a git repo
    # with a fixed commit date) or an upstream repository at a base commit (DeepSWE).
    repository_dir: str | None = None
    repository_url: str | None = None
    base_commit_hash: str | None = None


class AgentConfig(_Open):
    timeout_sec: float = Field(default=600.0, gt=0)
    max_steps: int | None = Field(default=None, gt=0)


class CollectHook(_Open):
    command: str
    timeout_sec: float = Field(default=300.0, gt=0)


class VerifierConfig(_Open):
    timeout_sec: float = Field(default=600.0, gt=0)
    env: dict[str, str] = Field(default_factory=dict)
    environment_mode: Literal["shared", "separate"] = "shared"
    collect: list[CollectHook] = Field(default_factory=list)


class EnvironmentConfig(_Open):
    docker_image: str | None = None
    cpus: float | None = Field(default=None, gt=0)
    memory_mb: int | None = Field(default=None, gt=0)
    storage_mb: int | None = Field(default=None, gt=0)
    build_timeout_sec: float = Field(default=600.0, gt=0)
    network_mode: Literal["public", "no-network", "allowlist"] = "public"
    workdir: str | None = None  # where commands run (machine tasks), else the image's WORKDIR

    @model_validator(mode="before")
    @classmethod
    def _legacy_sizes(cls, data):
        """Terminal-Bench 2's older `memory = "2G"` / `storage = "10G"` become memory_mb / storage_mb."""
        if isinstance(data, dict):
            for old, new in (("memory", "memory_mb"), ("storage", "storage_mb")):
                value = data.get(old)
                if isinstance(value, str) and new not in data:
                    data = {**data, new: _size_mb(value, f"environment.{old}")}
        return data


def _size_mb(text: str, where: str) -> int:
    units = {"G": 1024, "M": 1, "K": 1 / 1024}
    t = text.strip().upper().removesuffix("B")
    try:
        return max(1, int(float(t[:-1]) * units[t[-1]]))
    except (KeyError, ValueError, IndexError):
        raise ValueError(f"{where}: {text!r} is no size (e.g. '2G', '512M')") from None


class TaskConfig(_Open):
    schema_version: str = "1.0"
    metadata: MetadataConfig = Field(default_factory=MetadataConfig)
    agent: AgentConfig = Field(default_factory=AgentConfig)
    verifier: VerifierConfig = Field(default_factory=VerifierConfig)
    environment: EnvironmentConfig = Field(default_factory=EnvironmentConfig)
    artifacts: list[str] = Field(default_factory=list)


class GradingConfig(_Open):
    """tests/config.json (DeepSWE): the fail-to-pass and pass-to-pass test ids."""

    f2p_node_ids: list[str] = Field(default_factory=list)
    p2p_node_ids: list[str] = Field(default_factory=list)
    base_commit: str | None = None

    @property
    def required(self) -> list[str]:
        return list(dict.fromkeys(self.f2p_node_ids + self.p2p_node_ids))


def pydantic_error_line(path: Path, exc: ValidationError, prefix: str = "") -> str:
    """One line: file, field path and the first problem pydantic found."""
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"])
    more = f" (+{len(exc.errors()) - 1} more)" if len(exc.errors()) > 1 else ""
    return f"{path}: {prefix}{loc}: {err['msg']}{more}"


REPORT_KINDS = ("ctrf", "junit", "reward")
_REPORT_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*\.xml")
# pytest's --junitxml / --junit-xml naming a file in the verifier's logs dir ($LOGS_DIR or /logs/verifier)
_JUNIT_ARG = re.compile(
    r"--junit-?xml[= ]\s*[\"']?(?:\$\{?LOGS_DIR\}?|/logs/verifier)/([A-Za-z0-9_][A-Za-z0-9_.-]*\.xml)"
)


@dataclass(frozen=True)
class Task:
    """One task directory of a track."""

    id: str
    track: str
    path: Path
    config: TaskConfig = field(compare=False, repr=False)
    kind: str = "repository"  # repository | machine (from the track's track.toml)

    @property
    def verify_mode(self) -> Literal["fresh", "separate", "in_place"]:
        """Where this task's verifier runs: "fresh" - a fresh instance of the clean state plus the
        agent's final patch (repository tasks, Harbor's shared mode); "separate" - collect hooks in
        the agent's environment, then the task's own verifier image (DeepSWE); "in_place" - in the
        agent's own container after the agent stopped, its processes still running (Terminal-Bench 2)."""
        if self.kind == "machine":
            return "in_place"
        return "separate" if self.config.verifier.environment_mode == "separate" else "fresh"

    @property
    def instruction(self) -> str:
        return (self.path / "instruction.md").read_text(encoding="utf-8")

    @property
    def tests_dir(self) -> Path:
        return self.path / "tests"

    @property
    def solution_dir(self) -> Path:
        return self.path / "solution"

    @property
    def environment_dir(self) -> Path:
        return self.path / "environment"

    @property
    def repository_dir(self) -> Path | None:
        rel = self.config.metadata.repository_dir
        return (self.path / rel) if rel else None

    @cached_property
    def grading(self) -> GradingConfig | None:
        path = self.tests_dir / "config.json"
        if not path.exists():
            return None
        try:
            return GradingConfig.model_validate(json.loads(path.read_text(encoding="utf-8")))
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}: invalid JSON: {exc}") from None
        except ValidationError as exc:
            raise InputError(pydantic_error_line(path, exc)) from None

    @cached_property
    def reports(self) -> frozenset[str]:
        """Which verifier outputs grading reads: `[verifier] reports = [...]` in task.toml, else
        the kinds the task's own test files mention (a task whose test.sh writes JUnit is never
        graded from a ctrf.json or reward file that code under test wrote)."""
        declared = (self.config.verifier.model_extra or {}).get("reports")
        if declared is not None:
            if not isinstance(declared, list) or not declared or set(declared) - set(REPORT_KINDS):
                raise InputError(
                    f"{self.path / 'task.toml'}: verifier.reports: a non-empty list of "
                    f"{', '.join(REPORT_KINDS)}"
                )
            return frozenset(declared)
        text = ""
        for p in sorted(self.tests_dir.rglob("*")) if self.tests_dir.is_dir() else []:
            if (
                p.is_file()
                and p.suffix in ("", ".sh", ".py", ".js", ".ts", ".json", ".toml", ".yaml", ".yml")
                and p.stat().st_size < (1 << 20)
            ):
                text += p.read_text(encoding="utf-8", errors="replace").lower()
        return frozenset(k for k in REPORT_KINDS if k in text) or frozenset(REPORT_KINDS)

    @cached_property
    def junit_reports(self) -> tuple[str, ...]:
        """The JUnit files grading reads from the verifier's logs dir: `[verifier] junit_reports`
        in task.toml, else the names the task's own test files give pytest's --junitxml under the
        logs dir, else junit.xml. Never a glob: an extra XML file written there is not read."""
        declared = (self.config.verifier.model_extra or {}).get("junit_reports")
        if declared is not None:
            if not (
                isinstance(declared, list)
                and declared
                and all(isinstance(n, str) and _REPORT_NAME.fullmatch(n) for n in declared)
            ):
                raise InputError(
                    f"{self.path / 'task.toml'}: verifier.junit_reports: a non-empty list of file "
                    'names in the logs dir (e.g. ["junit.xml"])'
                )
            return tuple(dict.fromkeys(declared))
        names: dict[str, None] = {}
        for p in sorted(self.tests_dir.rglob("*")) if self.tests_dir.is_dir() else []:
            if (
                p.is_file()
                and p.suffix in ("", ".sh", ".py", ".toml", ".cfg", ".ini")
                and p.stat().st_size < (1 << 20)
            ):
                for m in _JUNIT_ARG.finditer(p.read_text(encoding="utf-8", errors="replace")):
                    names[m.group(1)] = None
        return tuple(names) or ("junit.xml",)

    def check_base_commit(self, actual: str, where: str) -> None:
        """InputError when task.toml names a base commit other than the one the environment has."""
        expected = self.config.metadata.base_commit_hash
        if expected and actual and expected != actual:
            raise InputError(
                f"{self.path / 'task.toml'}: metadata.base_commit_hash: {expected} does not match "
                f"{where} ({actual})"
            )

    @cached_property
    def solution_files(self) -> list[str]:
        """Files changed by the reference solution (for left-out-file metrics)."""
        patch = self.solution_dir / "solution.patch"
        return patch_files(patch.read_bytes()) if patch.exists() else []


def load_task(path: Path, track: str, kind: str | None = None) -> Task:
    """One task dir; `kind` defaults to the kind of the track (suites/<track>/track.toml)."""
    from swe_residual.tracks import track_kind

    path = Path(path)
    toml_path = path / "task.toml"
    if not toml_path.is_file():
        raise InputError(f"{toml_path}: missing (a Harbor task needs task.toml)")
    try:
        raw = tomllib.loads(toml_path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{toml_path}: invalid TOML: {exc}") from None
    try:
        config = TaskConfig.model_validate(raw)
    except ValidationError as exc:
        raise InputError(pydantic_error_line(toml_path, exc)) from None
    if not (path / "instruction.md").is_file():
        raise InputError(f"{path / 'instruction.md'}: missing (the request the agent sees)")
    tests = path / "tests"
    if not (tests / "test.sh").is_file():
        raise InputError(f"{tests / 'test.sh'}: missing (a task needs hidden tests with a test.sh entry)")
    kind = kind or track_kind(track)
    if kind not in KINDS:
        raise InputError(f"{toml_path}: kind {kind!r} is no task kind (choose from {', '.join(KINDS)})")
    task = Task(
        id=config.metadata.task_id or path.name, track=track, path=path.resolve(), config=config, kind=kind
    )
    repo = task.repository_dir
    if repo is not None and not repo.is_dir():
        raise InputError(f"{toml_path}: metadata.repository_dir: {repo} is not a directory")
    _ = task.grading, task.reports  # validate config.json and the declared reports early
    return task


def load_tasks(tasks_dir: Path, track: str, kind: str | None = None) -> dict[str, Task]:
    """Every task directory (one holding task.toml) directly under tasks_dir, by task id."""
    tasks_dir = Path(tasks_dir)
    if not tasks_dir.is_dir():
        raise InputError(f"{tasks_dir}: tasks directory does not exist")
    tasks: dict[str, Task] = {}
    for child in sorted(p for p in tasks_dir.iterdir() if (p / "task.toml").exists()):
        task = load_task(child, track, kind)
        if task.id in tasks:
            raise InputError(f"{child / 'task.toml'}: metadata.task_id: duplicate task id {task.id!r}")
        tasks[task.id] = task
    return tasks

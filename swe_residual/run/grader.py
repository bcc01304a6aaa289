"""One run of a task's hidden tests (class Grader) and what it gives (Verification).

The verifier of an attempt (run/verifier.py) decides where and how often the tests run; the
hardened re-grade (run/regrade.py) runs them once more. Both run them through a Grader, so neither
imports the other's module. The instances and inputs a run needs can be made ready ahead of it, on
a thread: VerifierStandby (an instance), Preload (inputs copied in).
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from swe_residual.backends.base import ARTIFACTS_DIR, TESTS_DIR, Backend, Environment, ExecResult
from swe_residual.backends.workspace import PATCH_IN_ENV, last_line, script
from swe_residual.errors import HarnessError, VerifierError
from swe_residual.run import grading_channel as rc
from swe_residual.run import hidden_tests
from swe_residual.run.background import Background
from swe_residual.run.grading_channel import Channel, Stream
from swe_residual.tasks import Task
from swe_residual.verdicts import Verdict, grade

LOG_LIMIT = 4 << 20  # characters of verifier output kept in verifier.log
APPLY_FAILED = "swe-residual: the final patch does not apply"
APPLY_FAILED_EXIT = 86
CHANGES_LIMIT = 20_000  # lines of final.changes kept


@dataclass
class Verification:
    verdict: Verdict
    duration_s: float
    log_path: Path
    patch_problem: str | None = None  # why final.patch is empty although the agent changed things
    note: str | None = None  # what the re-verify policy saw
    agent_caused: bool = False  # the verifier broke on the agent's state only: a valid failure
    stream: Stream | None = None  # what the report channel carried (None: this verification had none)
    channel_note: str | None = None  # why it had none
    channel_unloadable: bool = False  # the task's pytest could not import the channel plugin
    signals: list[str] = field(default_factory=list)  # the grading channels' cheat signals
    notes: list[str] = field(default_factory=list)  # ... and notes (grading_channel.py)
    hardened_s: float | None = None  # seconds of the hardened re-grade, where it ran
    hidden: dict[str, bool] = field(default_factory=dict)  # hidden_tests.found after a passing run


class ChannelUnloadable(Exception):
    """The task's pytest could not import the channel plugin: verify again without it."""


@dataclass(frozen=True)
class FinalInputs:
    """What a fresh verifier instance gets of the final state: the collected artifacts, else the
    final patch (neither: an unchanged tree)."""

    patch: Path | None = None
    collected: Path | None = None

    def items(self) -> list[tuple[Path, str]]:
        """(host path, Harbor path) pairs to copy in."""
        if self.collected is not None:
            return [(self.collected, ARTIFACTS_DIR)]
        return [(self.patch, PATCH_IN_ENV)] if self.patch is not None else []


@dataclass
class FreshRun:
    """How one run on a fresh verifier instance goes: when its grade began (its duration counts from
    there), the instance made ready for it (None: one is made; either way the run closes it) and the
    inputs already being copied into it, the report channel, and whether it is the hardened
    re-grade (no channel, grading_channel.HARDENED_PRELUDE, outputs named verifier-hardened)."""

    started: float
    instance: Environment | None = None
    preload: Preload | None = None
    channel: Channel | None = None
    hardened: bool = False
    tests: list[tuple[Path, str]] | None = None  # the hidden tests to copy in (None: the task's)

    @property
    def name(self) -> str:
        return "verifier-hardened" if self.hardened else "verifier"


@dataclass(frozen=True)
class InPlaceRun:
    """One run of the hidden tests in the agent's own container: the outputs' name (<name>/,
    <name>.log) and the hidden tests to copy in (None: the task's)."""

    name: str = "verifier"
    tests: list[tuple[Path, str]] | None = None


@dataclass(frozen=True)
class Command:
    """The hidden tests' shell command in one instance: its text, timeout and variables."""

    text: str
    timeout: float
    variables: dict[str, str]

    def applying_patch(self, instance: Environment) -> Command:
        """This command after the final patch is applied to the fresh clean tree (before the hidden
        tests, which test.sh installs over the agent's files)."""
        variables = {
            **self.variables,
            "SWE_APPLY": script("apply_patch.sh"),
            "SWE_PATCH": instance.path(PATCH_IN_ENV),
            "SWE_BASE": instance.base_commit,
            "SWE_APP": instance.app_dir,
        }
        text = f'bash -c "$SWE_APPLY" || {{ echo "{APPLY_FAILED}"; exit {APPLY_FAILED_EXIT}; }}\n{self.text}'
        return Command(text, self.timeout, variables)

    def execute(
        self, env: Environment, channel: Channel | None, stem: Path
    ) -> tuple[ExecResult, Stream | None]:
        """Run it in env, with the channel's exports before it; the channel's bytes are kept next to
        the logs (<stem>-channel.jsonl)."""
        prelude = channel.prelude(env.path(rc.CHANNEL_DIR)) if channel else ""
        if channel is None:
            return env.execute(prelude + self.text, timeout=self.timeout, env=self.variables), None
        res, raw = env.execute_with_channel(prelude + self.text, timeout=self.timeout, env=self.variables)
        if raw is None:
            return res, None
        Path(f"{stem}-channel.jsonl").write_bytes(raw)
        return res, rc.read_stream(raw)


def task_key(task: Task) -> str:
    return f"{task.track}--{task.id}"


@dataclass(frozen=True, eq=False)
class Grader:
    """A task's hidden tests on a backend: run once on a fresh verifier instance with a final
    state's inputs (fresh), or in the agent's own container (in_place)."""

    backend: Backend
    task: Task
    read_back: hidden_tests.ReadBack = field(default_factory=hidden_tests.ReadBack)

    @property
    def key(self) -> str:
        """The task's name in what a run remembers of it (reference checks, a channel it cannot load)."""
        return task_key(self.task)

    def instance(self) -> Environment:
        """A fresh verifier instance (the clean state, or the task's verifier image)."""
        return self.backend.verifier_environment(self.task)

    def agent_stopped(self, env: Environment) -> None:
        """The agent is done: its processes are killed, except where the verifier runs in place and
        the processes are part of the state being graded."""
        if self.task.verify_mode != "in_place":
            env.stop()

    def task_inputs(self) -> list[tuple[Path, str]]:
        """What a fresh verifier instance gets whatever the final state: the hidden tests (a separate
        verifier image that builds from tests/ has them already)."""
        task = self.task
        if task.config.verifier.environment_mode == "separate" and (task.tests_dir / "Dockerfile").is_file():
            return []
        return [(task.tests_dir, TESTS_DIR)]

    def collect(self, env: Environment, artifacts_dir: Path) -> Path:
        """Run the collect hooks in the agent's environment; the copied-out /logs/artifacts."""
        hooks = self.task.config.verifier.collect
        missing = [
            h.command.split()[0]
            for h in hooks
            if h.command.split()
            and h.command.split()[0].startswith("/")
            and env.read_file(h.command.split()[0]) is None
        ]
        if missing:
            self._restore_hooks(env, missing, artifacts_dir)
        with open(artifacts_dir / "collect.log", "w", encoding="utf-8") as log:
            for hook in hooks:
                res = env.execute(hook.command, timeout=hook.timeout_sec)
                log.write(f"$ {hook.command}\n{res.output[:LOG_LIMIT]}\n[exit {res.exit_code}]\n")
                if res.timed_out:
                    raise VerifierError(
                        f"collect hook {hook.command[:80]!r} timed out after {hook.timeout_sec:g}s"
                    )
        collected = artifacts_dir / "artifacts"
        shutil.rmtree(collected, ignore_errors=True)
        env.copy_out(ARTIFACTS_DIR, collected)
        return collected

    def _restore_hooks(self, env: Environment, missing: list[str], scratch: Path) -> None:
        """Hook scripts the agent deleted (e.g. `git clean -fdx` on an older DeepSWE task) are the
        harness's infrastructure shipped in the clean image: put back from a fresh instance."""
        fresh = self.backend.materialize(self.task, None)
        try:
            for path in dict.fromkeys(missing):
                data = fresh.read_file(path)
                if data is not None:
                    tmp = scratch / ".hook"
                    tmp.write_bytes(data)
                    tmp.chmod(0o755)
                    env.copy_in(tmp, path)
                    tmp.unlink()
        finally:
            fresh.close()

    def _command(self, instance: Environment, fresh: bool) -> Command:
        """test.sh in `instance`, its logs dir emptied first, with the verifier's variables (and the
        repository's place in a fresh instance)."""
        logs_dir = instance.path("/logs/verifier")
        app = {"APP_DIR": instance.app_dir} if fresh else {}
        variables = {
            **self.task.config.verifier.env,
            **app,
            "TESTS_DIR": instance.path(TESTS_DIR),
            "LOGS_DIR": logs_dir,
        }
        text = f'mkdir -p "{logs_dir}" && find "{logs_dir}" -mindepth 1 -delete; bash "{instance.path(TESTS_DIR)}/test.sh"'
        return Command(text, self.task.config.verifier.timeout_sec, variables)

    def _graded(self, res: ExecResult, stream: Stream | None, channel: Channel | None) -> None:
        """The run gave a grade to read: ChannelUnloadable, or a VerifierError when it timed out."""
        if channel is not None and stream is not None and channel.not_loadable(res.output, stream):
            raise ChannelUnloadable()
        if res.timed_out:
            timeout = self.task.config.verifier.timeout_sec
            raise VerifierError(f"verifier timed out after {timeout:g}s running tests/test.sh")

    def in_place(
        self, env: Environment, artifacts_dir: Path, channel: Channel | None, run: InPlaceRun = InPlaceRun()
    ) -> Verification:
        """Hidden tests in the agent's own container (Harbor's shared environment, Terminal-Bench 2);
        the paths the agent changed against the task image are kept as final.changes (first run)."""
        logs = artifacts_dir / run.name
        shutil.rmtree(logs, ignore_errors=True)
        started = time.monotonic()
        changes = env.changes() if run.name == "verifier" else None
        if changes is not None:
            kinds: dict[object, str] = {0: "C", 1: "A", 2: "D"}  # the engine's change kinds
            lines = sorted(f"{kinds.get(c.get('Kind'), '?')} {c.get('Path')}" for c in changes)
            (artifacts_dir / "final.changes").write_text(
                "\n".join(lines[:CHANGES_LIMIT]) + ("\n" if lines else ""), encoding="utf-8"
            )
        command = self._command(env, fresh=False)
        tests = run.tests if run.tests is not None else [(self.task.tests_dir, TESTS_DIR)]
        copy_in(env, tests, channel, artifacts_dir)
        res, stream = command.execute(env, channel, artifacts_dir / run.name)
        log_path = artifacts_dir / f"{run.name}.log"
        log_path.write_text(res.output[-LOG_LIMIT:], encoding="utf-8")
        # the agent's processes are part of the state (a re-verification needs them): not stopped here
        copy_outputs(env, logs)
        self._graded(res, stream, channel)
        verdict = grade(self.task, logs, res.exit_code)
        return Verification(
            verdict=verdict,
            duration_s=time.monotonic() - started,
            log_path=log_path,
            stream=stream,
            hidden=self.read_back.found(env, tests, self.task.tests_dir) if verdict.outcome == 1 else {},
        )

    def fresh(self, out: Path, inputs: FinalInputs, run: FreshRun) -> Verification:
        """The hidden tests on a fresh verifier instance with the final patch (or the collected
        artifacts); outputs in <out>/<name>/, the log in <name>.log (FreshRun.name). One command:
        the final patch applied to the fresh clean tree, the log dir emptied, then the tests."""
        logs = out / run.name
        shutil.rmtree(logs, ignore_errors=True)
        instance = run.instance or self.instance()
        items = inputs.items()
        tests = run.tests if run.tests is not None else self.task_inputs()
        log_path = out / f"{run.name}.log"
        command = self._command(instance, fresh=True)
        if inputs.patch is not None:
            command = command.applying_patch(instance)
        if run.hardened:
            command = Command(rc.HARDENED_PRELUDE + command.text, command.timeout, command.variables)
        try:
            if run.preload is not None:
                run.preload.wait()
                if rest := [i for i in items + tests if i not in run.preload.items]:
                    instance.copy_in_many(rest)
            else:
                copy_in(instance, items + tests, run.channel, out)
            res, stream = command.execute(instance, run.channel, out / run.name)
            log_path.write_text(res.output[-LOG_LIMIT:], encoding="utf-8")
            if res.exit_code == APPLY_FAILED_EXIT and APPLY_FAILED in res.output.splitlines():
                # the agent's tree does not survive as a patch on the clean state
                why = last_line(res.output.split(APPLY_FAILED)[0], "git apply failed").removeprefix("error: ")
                raise VerifierError(f"the final patch does not apply to a fresh clean instance: {why}")
            instance.stop()  # nothing the tests started writes the outputs once they are read
            copy_outputs(instance, logs)
            self._graded(res, stream, run.channel)
            verdict = grade(self.task, logs, res.exit_code)
            # a pass only: what the tests ran from matters where a pass is checked (run/hidden_tests.py)
            hidden = (
                self.read_back.found(instance, tests, self.task.tests_dir) if verdict.outcome == 1 else {}
            )
        finally:
            instance.close()
        return Verification(
            verdict=verdict,
            duration_s=time.monotonic() - run.started,
            log_path=log_path,
            stream=stream,
            hidden=hidden,
        )


def copy_in(env: Environment, inputs: list[tuple[Path, str]], channel: Channel | None, scratch: Path) -> None:
    """inputs, and the channel's plugin where there is a channel, into env in one copy."""
    staged = channel.staged(scratch) if channel is not None else None
    try:
        env.copy_in_many([*inputs, *([staged] if staged else [])])
    finally:
        if staged is not None:
            staged[0].unlink(missing_ok=True)


def copy_outputs(env: Environment, logs: Path) -> None:
    """The verifier's logs dir onto the host. What the tests left there is the agent's state's doing
    (a tree too large or too deep): a VerifierError, so the re-verify and reference policy decides
    whether it is the agent's; an engine failure fails the reference the same way (infra)."""
    try:
        env.copy_out("/logs/verifier", logs)
    except HarnessError as exc:
        raise VerifierError(f"the verifier's outputs cannot be copied: {exc}") from None


class Preload:
    """Inputs (and the channel's plugin) copied into a verifier instance on a thread while the
    harness does something else: the task's inputs while the agent's final state is read (the
    agent has stopped; they are the same for every final state), a re-grade's inputs while the
    normal grade runs. wait() re-raises what the copy raised."""

    def __init__(
        self, instance: Environment, items: list[tuple[Path, str]], channel: Channel | None, scratch: Path
    ):
        self.items = items
        self._copy: Background[None] = Background(
            lambda: copy_in(instance, items, channel, scratch), "swe-residual-preload"
        )

    def wait(self) -> None:
        self._copy.result()


class VerifierStandby:
    """A fresh verifier instance made ready while the agent works, so verification does not
    wait for it to start. It is the same fresh clean (or verifier-image) instance as always: the
    hidden tests and the final patch go in only after the agent stopped. `after`: another standby
    that starts first (the one needed first is not slowed by this one starting beside it)."""

    def __init__(self, grader: Grader, after: VerifierStandby | None = None):
        self._taken = False
        self._job: Background[Environment] = Background(
            lambda: self._make(grader, after), "swe-residual-standby"
        )

    @staticmethod
    def _make(grader: Grader, after: VerifierStandby | None) -> Environment:
        if after is not None:
            after._job.failure()  # waits until that one is ready (or failed)
        instance = grader.instance()
        try:
            instance.ready()
        except BaseException:
            instance.close()
            raise
        return instance

    def take(self) -> Environment | None:
        """The instance (once); None when it could not be made - the caller makes its own."""
        if self._taken:
            return None
        self._taken = True
        return None if self._job.failure() is not None else self._job.result()

    def close(self) -> None:
        """Remove the instance if nobody took it, in the background: the case does not wait for
        an instance it will not use to finish starting and be removed (what is still there when
        the process ends, its backend's close removes)."""
        if not self._taken:
            self._taken = True
            Background(self._remove, "swe-residual-standby-close")

    def _remove(self) -> None:
        try:
            if self._job.failure() is None:
                self._job.result().close()
        except Exception:  # noqa: BLE001 - the backend may be closing too; its close removes the instance
            pass

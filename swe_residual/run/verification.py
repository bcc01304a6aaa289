"""Verification of a final state, written once for every backend, with the re-verify policy.

Where a verifier runs is one explicit per-task mode (Task.verify_mode):
fresh (repository tasks, Harbor's shared mode): the final state, not the live workspace, is
graded - the agent's final tree becomes a patch against the base commit (workspace.final_state),
the patch is applied to a fresh instance of the clean state and the hidden tests run there,
copied to /tests only then; background processes, /tmp files and anything outside the
repository cannot reach the verifier.
separate (DeepSWE): the task's `[[verifier.collect]]` hooks run in the agent's stopped
environment, /logs/artifacts is copied out and into a fresh environment of the verifier image.
in_place (machine tasks, Terminal-Bench 2): the whole container is the state, so the hidden tests
are copied to /tests of the agent's own container once the agent has stopped and run there, its
processes still running (a service the task asks for must still answer). The paths the agent
changed against the task image are kept as final.changes.

A verifier problem (hang, crash, no or unreadable report, malformed reward) is not final: the
saved final state is verified once more; if that fails too, the verifier is tried on the
reference solution's state (once per task, cached in the run dir). If it works there, the agent's
code broke the tests: a valid failing verdict with a note. Otherwise it is an infra error.

Every verification carries a report channel where the verifier is pytest, and a passing grade is
re-graded in a hardened mode (swe_residual/run/grading_channel.py): what either finds that the
written report does not say becomes a cheat signal of the record, unless the same check also
disagrees on the reference solution's state (ReferenceChecks.grading). Where the machine has a CPU
to spare, the re-grade runs beside the normal grade and is dropped unless that grade passes
(HardenedRegrade).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path

from swe_residual.backends.base import ARTIFACTS_DIR, TESTS_DIR, Backend, Environment, ExecResult
from swe_residual.backends.workspace import PATCH_IN_ENV, final_state, last_line, script
from swe_residual.errors import HarnessError, InfraError, InputError, VerifierError
from swe_residual.run import grading_channel as rc
from swe_residual.run.grading_channel import Channel, Stream
from swe_residual.tasks import Task
from swe_residual.verdicts import Verdict, grade

LOG_LIMIT = 4 << 20  # characters of verifier output kept in verifier.log
APPLY_FAILED = "swe-residual: the final patch does not apply"
APPLY_FAILED_EXIT = 86
REFERENCE_RETRY_S = 30.0  # a reference check that failed is tried again after this long
# tasks whose pytest cannot import the channel plugin (an isolated interpreter): verified without it
_NO_CHANNEL: set[str] = set()


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
    signals: list[str] = field(default_factory=list)  # the grading channels' cheat signals
    notes: list[str] = field(default_factory=list)  # ... and notes (grading_channel.py)
    hardened_s: float | None = None  # seconds of the hardened re-grade, where it ran


def _collect(backend: Backend, task: Task, env: Environment, artifacts_dir: Path) -> Path:
    """Run the collect hooks in the agent's environment; the copied-out /logs/artifacts."""
    missing = [
        h.command.split()[0]
        for h in task.config.verifier.collect
        if h.command.split()
        and h.command.split()[0].startswith("/")
        and env.read_file(h.command.split()[0]) is None
    ]
    if missing:
        # hook scripts the agent deleted (e.g. `git clean -fdx` on an older DeepSWE task) are the
        # harness's infrastructure shipped in the clean image: put them back from a fresh instance
        fresh = backend.materialize(task, None)
        try:
            for path in dict.fromkeys(missing):
                data = fresh.read_file(path)
                if data is not None:
                    tmp = artifacts_dir / ".hook"
                    tmp.write_bytes(data)
                    tmp.chmod(0o755)
                    env.copy_in(tmp, path)
                    tmp.unlink()
        finally:
            fresh.close()
    with open(artifacts_dir / "collect.log", "w", encoding="utf-8") as log:
        for hook in task.config.verifier.collect:
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


class VerifierStandby:
    """A fresh verifier environment made ready while the agent works, so verification does not
    wait for it to start. It is the same fresh clean (or verifier-image) instance as always: the
    hidden tests and the final patch go in only after the agent stopped. `after`: another standby
    that starts first (the one needed first is not slowed by this one starting beside it)."""

    def __init__(self, backend: Backend, task: Task, after: VerifierStandby | None = None):
        self._future: Future[Environment] = Future()
        self._taken = False
        threading.Thread(
            target=self._make, args=(backend, task, after), daemon=True, name="swe-residual-standby"
        ).start()

    def _make(self, backend: Backend, task: Task, after: VerifierStandby | None) -> None:
        try:
            if after is not None:
                after._future.exception()  # waits until that one is ready (or failed)
            env = backend.verifier_environment(task)
            try:
                env.ready()
            except BaseException:
                env.close()
                raise
            self._future.set_result(env)
        except BaseException as exc:  # noqa: BLE001 - verification makes its own and reports the problem
            self._future.set_exception(exc)

    def take(self) -> Environment | None:
        """The environment (once); None when it could not be made - the caller makes its own."""
        if self._taken:
            return None
        self._taken = True
        return None if self._future.exception() is not None else self._future.result()

    def close(self) -> None:
        """Remove the environment if nobody took it, in the background: the case does not wait for
        an instance it will not use to finish starting and be removed (what is still there when
        the process ends, its backend's close removes)."""
        if not self._taken:
            self._taken = True
            threading.Thread(target=self._remove, daemon=True, name="swe-residual-standby-close").start()

    def _remove(self) -> None:
        try:
            if self._future.exception() is None:
                self._future.result().close()
        except Exception:  # noqa: BLE001 - the backend may be closing too; its close removes the instance
            pass


def agent_stopped(task: Task, env: Environment) -> None:
    """The agent is done: its processes are killed, except where the verifier runs in place and
    the processes are part of the state being graded."""
    if task.verify_mode != "in_place":
        env.stop()


CHANGES_LIMIT = 20_000  # lines of final.changes kept


def _verify_in_place(
    task: Task, env: Environment, artifacts_dir: Path, channel: Channel | None
) -> Verification:
    """Hidden tests in the agent's own container (Harbor's shared environment, Terminal-Bench 2)."""
    logs = artifacts_dir / "verifier"
    shutil.rmtree(logs, ignore_errors=True)
    started = time.monotonic()
    changes = env.changes()
    if changes is not None:
        kinds = {0: "C", 1: "A", 2: "D"}
        lines = sorted(f"{kinds.get(c.get('Kind'), '?')} {c.get('Path')}" for c in changes)
        (artifacts_dir / "final.changes").write_text(
            "\n".join(lines[:CHANGES_LIMIT]) + ("\n" if lines else ""), encoding="utf-8"
        )
    timeout = task.config.verifier.timeout_sec
    logs_dir = env.path("/logs/verifier")
    venv = {**task.config.verifier.env, "TESTS_DIR": env.path(TESTS_DIR), "LOGS_DIR": logs_dir}
    _copy_in(env, [(task.tests_dir, TESTS_DIR)], channel, artifacts_dir)
    res, stream = _execute(
        env,
        f'mkdir -p "{logs_dir}" && find "{logs_dir}" -mindepth 1 -delete; '
        f'bash "{env.path(TESTS_DIR)}/test.sh"',
        timeout,
        venv,
        channel,
        artifacts_dir / "verifier",
    )
    log_path = artifacts_dir / "verifier.log"
    log_path.write_text(res.output[-LOG_LIMIT:], encoding="utf-8")
    # the agent's processes are part of the state (a re-verification needs them): not stopped here
    _copy_outputs(env, logs)
    if channel is not None and stream is not None and channel.not_loadable(res.output, stream):
        raise _ChannelUnloadable()
    if res.timed_out:
        raise VerifierError(f"verifier timed out after {timeout:g}s running tests/test.sh")
    return Verification(
        verdict=grade(task, logs, res.exit_code),
        duration_s=time.monotonic() - started,
        log_path=log_path,
        stream=stream,
    )


class _ChannelUnloadable(Exception):
    """The task's pytest could not import the channel plugin: verify again without it."""


def _execute(
    env: Environment,
    command: str,
    timeout: float,
    variables: dict[str, str],
    channel: Channel | None,
    name: str | Path,
    hardened: bool = False,
) -> tuple[ExecResult, Stream | None]:
    """The test command, with the channel's and the hardened mode's exports before it; the
    channel's bytes are kept next to the logs (<name>-channel.jsonl)."""
    prelude = (channel.prelude(env.path(rc.CHANNEL_DIR)) if channel else "") + (
        rc.HARDENED_PRELUDE if hardened else ""
    )
    if channel is None:
        return env.execute(prelude + command, timeout=timeout, env=variables), None
    res, raw = env.execute_with_channel(prelude + command, timeout=timeout, env=variables)
    if raw is None:
        return res, None
    Path(f"{name}-channel.jsonl").write_bytes(raw)
    return res, rc.read_stream(raw)


def _copy_outputs(env: Environment, logs: Path) -> None:
    """The verifier's logs dir onto the host. What the tests left there is the agent's state's doing
    (a tree too large or too deep): a VerifierError, so the re-verify and reference policy decides
    whether it is the agent's; an engine failure fails the reference the same way (infra)."""
    try:
        env.copy_out("/logs/verifier", logs)
    except HarnessError as exc:
        raise VerifierError(f"the verifier's outputs cannot be copied: {exc}") from None


def _task_key(task: Task) -> str:
    return f"{task.track}--{task.id}"


def run_verifier(
    backend: Backend,
    task: Task,
    env: Environment,
    artifacts_dir: Path,
    *,
    grade_uncommitted: bool = False,
    venv: Environment | None = None,
    channel: bool = True,
    regrade: HardenedRegrade | None = None,
) -> Verification:
    """One verification of env's final state (env is stopped and left as it is). First writes
    <artifacts>/final.patch, the binary diff of the whole final tree against the base commit, and
    final.ignored, the paths .gitignore rules kept out of it.

    grade_uncommitted: grade that diff instead of the collected model.patch (separate mode) - how
    an uncommitted residual state itself is graded, since the published hook sees only commits.
    In in_place mode there is no patch: the tests run in env itself. channel: with the report
    channel (where the task's pytest can import it; grading_channel.py). regrade: told when the
    final state is written (HardenedRegrade.begin).
    """
    use = channel and _task_key(task) not in _NO_CHANNEL
    try:
        v = _dispatch(
            backend, task, env, artifacts_dir, grade_uncommitted, venv, Channel() if use else None, regrade
        )
    except _ChannelUnloadable:
        _NO_CHANNEL.add(_task_key(task))
        v = _dispatch(backend, task, env, artifacts_dir, grade_uncommitted, None, None, regrade)
        v.channel_note = (
            "the task's pytest cannot import the channel plugin (an isolated interpreter, or "
            "PYTHONPATH dropped): verified again without it"
        )
        return v
    if channel and not use:
        v.channel_note = "the task's pytest cannot import the channel plugin (found earlier in this run)"
    return v


def _dispatch(
    backend: Backend,
    task: Task,
    env: Environment,
    artifacts_dir: Path,
    grade_uncommitted: bool,
    venv: Environment | None,
    channel: Channel | None,
    regrade: HardenedRegrade | None,
) -> Verification:
    if task.verify_mode == "in_place":
        if venv is not None:
            venv.close()
        return _verify_in_place(task, env, artifacts_dir, channel)
    try:
        return _verify(backend, task, env, artifacts_dir, grade_uncommitted, venv, channel, regrade)
    finally:
        if venv is not None:
            venv.close()


def _copy_in(
    env: Environment, inputs: list[tuple[Path, str]], channel: Channel | None, scratch: Path
) -> None:
    """inputs, and the channel's plugin where there is a channel, into env in one copy."""
    staged = channel.staged(scratch) if channel is not None else None
    try:
        env.copy_in_many([*inputs, *([staged] if staged else [])])
    finally:
        if staged is not None:
            staged[0].unlink(missing_ok=True)


def _task_inputs(task: Task) -> list[tuple[Path, str]]:
    """What a fresh verifier instance gets whatever the final state: the hidden tests (a separate
    verifier image that builds from tests/ has them already)."""
    if task.config.verifier.environment_mode == "separate" and (task.tests_dir / "Dockerfile").is_file():
        return []
    return [(task.tests_dir, TESTS_DIR)]


def _state_inputs(patch: Path | None, collected: Path | None) -> list[tuple[Path, str]]:
    """What a fresh verifier instance gets of the final state: the collected artifacts, else the
    final patch (none for an unchanged tree)."""
    if collected is not None:
        return [(collected, ARTIFACTS_DIR)]
    return [(patch, PATCH_IN_ENV)] if patch is not None else []


class _Preload:
    """Inputs (and the channel's plugin) copied into a verifier instance on a thread while the
    harness does something else: the task's inputs while the agent's final state is read (the
    agent has stopped; they are the same for every final state), a re-grade's inputs while the
    normal grade runs. wait() re-raises what the copy raised."""

    def __init__(
        self, venv: Environment, items: list[tuple[Path, str]], channel: Channel | None, scratch: Path
    ):
        self.items = items
        self._done: Future[None] = Future()
        threading.Thread(
            target=self._copy, args=(venv, channel, scratch), daemon=True, name="swe-residual-preload"
        ).start()

    def _copy(self, venv: Environment, channel: Channel | None, scratch: Path) -> None:
        try:
            _copy_in(venv, self.items, channel, scratch)
            self._done.set_result(None)
        except BaseException as exc:  # noqa: BLE001 - re-raised by wait()
            self._done.set_exception(exc)

    def wait(self) -> None:
        self._done.result()


def _verify(
    backend: Backend,
    task: Task,
    env: Environment,
    artifacts_dir: Path,
    grade_uncommitted: bool,
    venv: Environment | None,
    channel: Channel | None,
    regrade: HardenedRegrade | None,
) -> Verification:
    started = time.monotonic()
    shutil.rmtree(artifacts_dir / "verifier", ignore_errors=True)
    preload = _Preload(venv, _task_inputs(task), channel, artifacts_dir) if venv is not None else None
    final = final_state(env)
    if final.problem:  # never grade the clean state in place of a final state we could not read
        raise VerifierError(final.problem)
    patch_path = artifacts_dir / "final.patch"
    patch_path.write_bytes(final.patch)
    if final.ignored:
        (artifacts_dir / "final.ignored").write_text("\n".join(final.ignored) + "\n", encoding="utf-8")
    separate = task.config.verifier.environment_mode == "separate"
    collected = _collect(backend, task, env, artifacts_dir) if separate else None
    if collected is not None and grade_uncommitted:
        (collected / "model.patch").write_bytes(final.patch)
    if regrade is not None:
        regrade.begin()
    v = _run_fresh(
        backend,
        task,
        artifacts_dir,
        patch_path if collected is None and final.patch else None,
        collected,
        venv=venv,
        channel=channel,
        started=started,
        preload=preload,
    )
    v.patch_problem = final.problem
    return v


def _run_fresh(
    backend: Backend,
    task: Task,
    artifacts_dir: Path,
    patch: Path | None,
    collected: Path | None,
    *,
    venv: Environment | None,
    channel: Channel | None,
    started: float,
    hardened: bool = False,
    name: str = "verifier",
    preload: _Preload | None = None,
) -> Verification:
    """The hidden tests on a fresh verifier instance with the final patch (or the collected
    artifacts); outputs in <artifacts>/<name>/, the log in <name>.log. preload: inputs (and the
    channel) being copied into venv already."""
    logs = artifacts_dir / name
    shutil.rmtree(logs, ignore_errors=True)
    venv = venv or backend.verifier_environment(task)
    inputs = _state_inputs(patch, collected)
    timeout = task.config.verifier.timeout_sec
    log_path = artifacts_dir / f"{name}.log"
    logs_dir = venv.path("/logs/verifier")
    env = {
        **task.config.verifier.env,
        "APP_DIR": venv.app_dir,
        "TESTS_DIR": venv.path(TESTS_DIR),
        "LOGS_DIR": logs_dir,
    }
    # one command: the final patch applied to the fresh clean tree (before the hidden tests, which
    # test.sh installs over the agent's files), the log dir emptied, then the tests
    command = f'mkdir -p "{logs_dir}" && find "{logs_dir}" -mindepth 1 -delete; bash "{venv.path(TESTS_DIR)}/test.sh"'
    if patch is not None:
        env.update(
            SWE_APPLY=script("apply_patch.sh"),
            SWE_PATCH=venv.path(PATCH_IN_ENV),
            SWE_BASE=venv.base_commit,
            SWE_APP=venv.app_dir,
        )
        command = f'bash -c "$SWE_APPLY" || {{ echo "{APPLY_FAILED}"; exit {APPLY_FAILED_EXIT}; }}\n{command}'
    try:
        if preload is not None:
            preload.wait()
            if rest := [i for i in inputs + _task_inputs(task) if i not in preload.items]:
                venv.copy_in_many(rest)
        else:
            _copy_in(venv, inputs + _task_inputs(task), channel, artifacts_dir)
        res, stream = _execute(venv, command, timeout, env, channel, artifacts_dir / name, hardened)
        log_path.write_text(res.output[-LOG_LIMIT:], encoding="utf-8")
        if res.exit_code == APPLY_FAILED_EXIT and APPLY_FAILED in res.output.splitlines():
            # the agent's tree does not survive as a patch on the clean state
            why = last_line(res.output.split(APPLY_FAILED)[0], "git apply failed").removeprefix("error: ")
            raise VerifierError(f"the final patch does not apply to a fresh clean instance: {why}")
        venv.stop()  # nothing the tests started writes the outputs once they are read
        _copy_outputs(venv, logs)
    finally:
        venv.close()
    duration = time.monotonic() - started
    if channel is not None and stream is not None and channel.not_loadable(res.output, stream):
        raise _ChannelUnloadable()
    if res.timed_out:
        raise VerifierError(f"verifier timed out after {timeout:g}s running tests/test.sh")
    return Verification(
        verdict=grade(task, logs, res.exit_code), duration_s=duration, log_path=log_path, stream=stream
    )


def hardened_regrade(
    backend: Backend, task: Task, artifacts_dir: Path, venv: Environment | None = None
) -> Verification:
    """The final state graded again on a fresh instance (`venv`, else a new one) in the hardened
    mode (grading_channel.py): final.patch (or the collected model.patch) without its runner files,
    written next to it as final.hardened.patch; outputs in verifier-hardened/. A VerifierError
    when it gives no verdict."""
    started = time.monotonic()
    try:
        patch, collected = _hardened_inputs(task, artifacts_dir, artifacts_dir)
    except BaseException:
        if venv is not None:
            venv.close()
        raise
    return _run_hardened(backend, task, artifacts_dir, patch, collected, venv, started)


def _hardened_inputs(task: Task, artifacts_dir: Path, out: Path) -> tuple[Path | None, Path | None]:
    """(patch, collected) of the hardened re-grade, written into `out` from the final state in
    artifacts_dir: final.hardened.patch, or artifacts-hardened/ with its model.patch hardened."""
    if task.config.verifier.environment_mode == "separate":
        collected = out / "artifacts-hardened"
        shutil.rmtree(collected, ignore_errors=True)
        shutil.copytree(artifacts_dir / "artifacts", collected, symlinks=True)
        model = collected / "model.patch"
        if model.is_file() and not model.is_symlink():
            model.write_bytes(rc.hardened_patch(model.read_bytes())[0])
        return None, collected
    source = artifacts_dir / "final.patch"
    data = rc.hardened_patch(source.read_bytes())[0] if source.is_file() else b""
    if not data:
        return None, None
    patch = out / "final.hardened.patch"
    patch.write_bytes(data)
    return patch, None


def _run_hardened(
    backend: Backend,
    task: Task,
    out: Path,
    patch: Path | None,
    collected: Path | None,
    venv: Environment | None,
    started: float,
    preload: _Preload | None = None,
) -> Verification:
    return _run_fresh(
        backend,
        task,
        out,
        patch,
        collected,
        venv=venv,
        channel=None,
        started=started,
        hardened=True,
        name="verifier-hardened",
        preload=preload,
    )


REGRADE_MODES = ("beside", "after")


def regrade_mode(workers: int, interruptible: bool = True) -> str:
    """Where a process running `workers` cases at once runs the hardened re-grade: "beside" the
    normal grade where the machine has a CPU to spare for it (at least two per worker) and the
    backend can stop a re-grade whose grade failed (Backend.interruptible), else "after" a passing
    grade. SWE_RESIDUAL_REGRADE=beside|after chooses instead (for measuring)."""
    chosen = os.environ.get("SWE_RESIDUAL_REGRADE", "")
    if chosen:
        if chosen not in REGRADE_MODES:
            raise InputError(
                f"SWE_RESIDUAL_REGRADE={chosen!r}: expected one of {', '.join(REGRADE_MODES)} "
                "(or unset it: chosen from the CPUs and workers)"
            )
        return chosen
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return "beside" if interruptible and 2 * max(1, workers) <= cpus else "after"


class HardenedRegrade:
    """The hardened re-grade of one verification (check_grading), on a fresh instance that a
    VerifierStandby starts while the normal grade runs ("beside": while the agent works).

    As soon as the final state is written (begin), the re-grade's inputs are made from it in a
    scratch dir of its own and copied into that instance on a thread. Mode "after": the re-grade
    runs once the grade passed. Mode "beside": it runs on at once, beside the normal grade. A
    passing grade takes its result (the outputs moved into the artifacts dir); any other ends it
    unused (abandon: its instance removed at once, its scratch dir deleted). The inputs, the kind
    of instance and so the verdict are the same either way; so are the artifacts a record points
    to. "beside" spends a second grade's CPU on a grade that fails, so that a passing case does
    not wait for its re-grade (regrade_mode says where that pays)."""

    def __init__(
        self,
        backend: Backend,
        task: Task,
        artifacts_dir: Path,
        mode: str = "after",
        after: VerifierStandby | None = None,
    ):
        self.backend, self.task, self.artifacts_dir, self.mode = backend, task, artifacts_dir, mode
        self.standby = VerifierStandby(backend, task, after) if mode == "beside" else None
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._scratch: Path | None = None
        self._inputs: tuple[Path | None, Path | None] = (None, None)
        self._started = 0.0
        self._venv: Environment | None = None
        self._preload: _Preload | None = None
        self._outcome: Verification | BaseException | None = None
        self._finished = self._abandoned = self._used = False

    def grading(self) -> None:
        """The normal grade starts: the re-grade's instance starts now, if it has not yet."""
        if self.standby is None:
            self.standby = VerifierStandby(self.backend, self.task)

    def _instance(self) -> Environment | None:
        """The standby instance (once; None: it could not be made, or is taken)."""
        self.grading()
        return self.standby.take()

    def begin(self) -> None:
        """The final state is written (final.patch, or the collected artifacts): the re-grade's
        inputs are made from it now and go into its instance (once); "beside": it runs on."""
        if self._thread is not None or self._abandoned:
            return
        self._started = time.monotonic()
        # beside the attempt dir: its outputs are renamed into it, never copied
        self._scratch = Path(tempfile.mkdtemp(prefix=".regrade-", dir=self.artifacts_dir.parent))
        try:
            self._inputs = _hardened_inputs(self.task, self.artifacts_dir, self._scratch)
        except BaseException:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None
            raise
        self._thread = threading.Thread(target=self._run, daemon=True, name="swe-residual-regrade")
        self._thread.start()

    def _run(self) -> None:
        try:
            venv = self._instance() or self.backend.verifier_environment(self.task)
            with self._lock:
                self._venv = venv
                abandoned = self._abandoned
            if abandoned:
                venv.close()
                return
            patch, collected = self._inputs
            self._preload = _Preload(
                venv, _state_inputs(patch, collected) + _task_inputs(self.task), None, self._scratch
            )
            self._preload.wait()
            if self.mode == "beside":
                self._outcome = self._grade()
        except BaseException as exc:  # noqa: BLE001 - given to result(), or dropped with the re-grade
            self._outcome = exc
        finally:
            with self._lock:
                self._finished = True
                drop = self._abandoned
            if drop:
                self._drop()

    def _grade(self) -> Verification:
        patch, collected = self._inputs
        return _run_hardened(
            self.backend, self.task, self._scratch, patch, collected, self._venv, self._started, self._preload
        )

    def _drop(self) -> None:
        if self._venv is not None:
            self._venv.close()
        shutil.rmtree(self._scratch, ignore_errors=True)

    def result(self) -> Verification:
        """The re-grade's Verification (a VerifierError when it gave no verdict): the one begun
        with the final state (in "after" mode it runs now), else one run now from the start."""
        if self._thread is None or self._abandoned:
            self._used = True
            return hardened_regrade(self.backend, self.task, self.artifacts_dir, self._instance())
        self._thread.join()
        self._used = True
        outcome = self._outcome
        try:
            if outcome is None:  # "after": the inputs are in; the re-grade runs now
                try:
                    outcome = self._grade()
                except BaseException as exc:  # noqa: BLE001 - raised below, once the outputs are moved
                    outcome = exc
            for entry in sorted(self._scratch.iterdir()):
                target = self.artifacts_dir / entry.name
                if target.is_dir() and not target.is_symlink():
                    shutil.rmtree(target)
                entry.replace(target)
        finally:
            self._drop()
        if isinstance(outcome, BaseException):
            raise outcome
        outcome.log_path = self.artifacts_dir / outcome.log_path.name
        return outcome

    def abandon(self) -> None:
        """The grade did not pass (or is verified again): end the re-grade unused, without
        waiting for it (its instance is removed at once; the scratch dir goes when it ended)."""
        with self._lock:
            if self._abandoned or self._used:
                return
            self._abandoned = True
            venv, finished = self._venv, self._finished
        if self._thread is None:
            if self.standby is not None:
                self.standby.close()
        elif finished:
            self._drop()
        elif venv is not None:
            venv.interrupt()

    def close(self) -> None:
        """The verification is over (or never came): a re-grade nobody took is abandoned."""
        self.abandon()
        if self.standby is not None:
            self.standby.close()


@dataclass
class ReferenceGrading:
    """How the grading channels read the reference solution's state: does the channel agree with
    its written report, does the hardened re-grade give its grade (None: not known)."""

    channel_agrees: bool | None = None
    hardened_agrees: bool | None = None
    detail: str = ""

    def judge(self, signals: list[str]) -> tuple[list[str], list[str]]:
        """(signals, notes): a finding that the same check also makes on the reference solution's
        state is a note; one that cannot be checked there stays a signal (fail closed)."""
        kept: list[str] = []
        notes: list[str] = []
        unchecked = False
        for s in signals:
            agrees = self.channel_agrees if s.startswith(rc.MISMATCH) else self.hardened_agrees
            if agrees is False:
                notes.append(
                    f"{s} (the same check disagrees on the reference solution's state: it cannot read "
                    "this task's verifier)"
                )
            else:
                kept.append(s)
                unchecked = unchecked or agrees is None
        if unchecked:
            notes.append(
                f"grading channels: a signal could not be checked on the reference solution's state "
                f"({self.detail})"
            )
        return kept, notes


class ReferenceChecks:
    """Questions about the task's verifier, answered on the reference solution's state once per
    task: does the verifier work there (works), how do the grading channels read it (grading). An
    answer is remembered in <run-dir>/reference/ (shared by every worker and a --resume); a check
    that failed only by this process, for retry_s seconds (the cases right behind it get the same
    answer at once), then the next case checks again: a transient failure never sticks."""

    def __init__(self, run_dir: Path, retry_s: float = REFERENCE_RETRY_S):
        self.dir = run_dir / "reference"
        self.retry_s = retry_s
        self._lock = threading.Lock()
        self._broken: dict[str, tuple[float, str]] = {}  # name -> (when the check failed, why)

    def _failed_lately(self, name: str) -> str | None:
        known = self._broken.get(name)
        if known is not None and time.monotonic() - known[0] < self.retry_s:
            return known[1]
        self._broken.pop(name, None)
        return None

    def _remember(self, path: Path, data: dict) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data), encoding="utf-8")
        tmp.replace(path)

    def works(self, backend: Backend, task: Task) -> tuple[bool, str]:
        key = _task_key(task)
        path = self.dir / f"{key}.json"
        with self._lock:
            if (why := self._failed_lately(key)) is not None:
                return False, why
            if path.is_file():
                return True, json.loads(path.read_text(encoding="utf-8"))["detail"]
            works, detail = self._check(backend, task)
            if not works:
                self._broken[key] = (time.monotonic(), detail)
                return False, detail
            self._remember(path, {"detail": detail})
            return True, detail

    def _reference_run(self, backend: Backend, task: Task, work: Path) -> Verification:
        from swe_residual.agents.builtin import apply_reference_solution

        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        env = backend.materialize(task, None)
        try:
            apply_reference_solution(env, task, timeout=task.config.agent.timeout_sec)
            agent_stopped(task, env)
            return run_verifier(backend, task, env, work)
        finally:
            env.close()

    def _check(self, backend: Backend, task: Task) -> tuple[bool, str]:
        try:
            v = self._reference_run(backend, task, self.dir / f"{_task_key(task)}.{os.getpid()}")
        except VerifierError as exc:
            return False, f"the verifier fails on the reference solution's state too: {exc}"
        except InfraError as exc:
            return False, f"the reference solution's state could not be checked: {exc}"
        return True, f"the verifier works on the reference solution's state (outcome {v.verdict.outcome})"

    def grading(self, backend: Backend, task: Task) -> ReferenceGrading:
        """The report channel and the hardened re-grade on the reference solution's state."""
        key = f"{_task_key(task)}.grading"
        path = self.dir / f"{key}.json"
        with self._lock:
            if (why := self._failed_lately(key)) is not None:
                return ReferenceGrading(detail=why)
            if (known := _read_grading(path)) is not None:
                return known
            work = self.dir / f"{key}.{os.getpid()}"  # workers of a run may check at the same time
            try:
                v = self._reference_run(backend, task, work)
                channel = (
                    None
                    if v.stream is None or not v.stream.loaded
                    else not rc.disagreements(v.stream, v.verdict)
                )
                hardened = None
                if task.verify_mode != "in_place":
                    try:
                        hardened = (
                            rc.regrade_difference(v.verdict, hardened_regrade(backend, task, work).verdict)
                            is None
                        )
                    except VerifierError:
                        hardened = False
            except (VerifierError, InfraError) as exc:
                why = f"the reference solution's state could not be checked: {str(exc)[:300]}"
                self._broken[key] = (time.monotonic(), why)
                return ReferenceGrading(detail=why)
            unknown = [
                what
                for what, known in (
                    ("it had no report channel", channel),
                    ("the hardened re-grade does not run in place", hardened),
                )
                if known is None
            ]
            result = ReferenceGrading(
                channel,
                hardened,
                "; ".join(unknown)
                or f"checked on the reference solution's state (outcome {v.verdict.outcome})",
            )
            self._remember(
                path, {"channel_agrees": channel, "hardened_agrees": hardened, "detail": result.detail}
            )
            return result


def _read_grading(path: Path) -> ReferenceGrading | None:
    """A remembered ReferenceChecks.grading answer; None when there is none (or it is unreadable:
    then it is checked again)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        known = ReferenceGrading(data["channel_agrees"], data["hardened_agrees"], str(data["detail"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    ok = all(isinstance(x, bool) or x is None for x in (known.channel_agrees, known.hardened_agrees))
    return known if ok else None


def verify_with_policy(
    backend: Backend,
    task: Task,
    env: Environment,
    artifacts_dir: Path,
    references: ReferenceChecks,
    *,
    grade_uncommitted: bool = False,
    standby: VerifierStandby | None = None,
    regrade: HardenedRegrade | None = None,
) -> Verification:
    """Verify; on a verifier problem re-verify once, then decide who caused it (docs/errors.md).
    A verdict of the tests is then checked by the grading channels (check_grading), the hardened
    re-grade by `regrade` (one is made here, mode "after", when the caller has none)."""
    if regrade is None and task.verify_mode != "in_place":
        regrade = HardenedRegrade(backend, task, artifacts_dir)
    if regrade is not None:
        regrade.grading()
    try:
        v = _verify_once_or_twice(
            backend, task, env, artifacts_dir, references, grade_uncommitted, standby, regrade
        )
        if not v.agent_caused:
            check_grading(backend, task, artifacts_dir, references, v, regrade)
    finally:
        if regrade is not None:
            regrade.close()
    return v


def _verify_once_or_twice(
    backend: Backend,
    task: Task,
    env: Environment,
    artifacts_dir: Path,
    references: ReferenceChecks,
    grade_uncommitted: bool,
    standby: VerifierStandby | None,
    regrade: HardenedRegrade | None,
) -> Verification:
    try:
        return run_verifier(
            backend,
            task,
            env,
            artifacts_dir,
            grade_uncommitted=grade_uncommitted,
            venv=standby.take() if standby is not None else None,
            regrade=regrade,
        )
    except VerifierError as first:
        problem = str(first)
        if regrade is not None:  # a re-grade begun on this try's final state: this try gave no grade
            regrade.abandon()
    try:
        v = run_verifier(backend, task, env, artifacts_dir, grade_uncommitted=grade_uncommitted)
        v.note = f"re-verified once after: {problem}"
        return v
    except VerifierError as second:
        problem = str(second)
    works, detail = references.works(backend, task)
    if not works:
        raise VerifierError(f"{problem} (twice; {detail})")
    required = task.grading.required if task.grading is not None else []
    verdict = Verdict(outcome=0, tests={t: "failed" for t in required}, missing=list(required))
    return Verification(
        verdict=verdict,
        duration_s=0.0,
        log_path=artifacts_dir / "verifier.log",
        note=f"the agent's state breaks the verifier: {problem} (twice); {detail}",
        agent_caused=True,
    )


def check_grading(
    backend: Backend,
    task: Task,
    artifacts_dir: Path,
    references: ReferenceChecks,
    v: Verification,
    regrade: HardenedRegrade | None = None,
) -> None:
    """The grading channels' signals and notes on v (grading_channel.py): the channel against the
    written report; for a passing grade, the hardened re-grade (its seconds in v.hardened_s); a
    signal is checked against the reference solution's state before it stands."""
    if v.stream is None:
        signals: list[str] = []
        v.notes.append(f"{rc.UNAVAILABLE}: {v.channel_note or 'this backend gives the verifier no channel'}")
    else:
        signals, notes = rc.channel_flags(v.stream, v.verdict)
        v.notes.extend(notes)
    if v.verdict.outcome == 1:
        if task.verify_mode == "in_place":
            v.notes.append(
                f"{rc.NOT_HARDENED}: the tests ran in the agent's own container, whose state a second "
                "run would not find as the first left it"
            )
        else:
            t0 = time.monotonic()
            try:
                hardened = (
                    regrade.result()
                    if regrade is not None
                    else hardened_regrade(backend, task, artifacts_dir)
                )
                difference = rc.regrade_difference(v.verdict, hardened.verdict)
                v.hardened_s = hardened.duration_s
            except VerifierError as exc:
                difference = rc.regrade_difference(v.verdict, None, str(exc)[:300])
                v.hardened_s = time.monotonic() - t0
            if difference:
                signals.append(difference)
    if signals:
        signals, notes = references.grading(backend, task).judge(signals)
        v.notes.extend(notes)
    v.signals = signals

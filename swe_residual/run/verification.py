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
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

from swe_residual.backends.base import ARTIFACTS_DIR, TESTS_DIR, Backend, Environment
from swe_residual.backends.workspace import PATCH_IN_ENV, final_state, last_line, script
from swe_residual.errors import HarnessError, InfraError, VerifierError
from swe_residual.tasks import Task
from swe_residual.verdicts import Verdict, grade

LOG_LIMIT = 4 << 20               # characters of verifier output kept in verifier.log
APPLY_FAILED = "swe-residual: the final patch does not apply"
APPLY_FAILED_EXIT = 86


@dataclass
class Verification:
    verdict: Verdict
    duration_s: float
    log_path: Path
    patch_problem: str | None = None  # why final.patch is empty although the agent changed things
    note: str | None = None        # what the re-verify policy saw
    agent_caused: bool = False     # the verifier broke on the agent's state only: a valid failure


def _collect(backend: Backend, task: Task, env: Environment, artifacts_dir: Path) -> Path:
    """Run the collect hooks in the agent's environment; the copied-out /logs/artifacts."""
    missing = [h.command.split()[0] for h in task.config.verifier.collect
               if h.command.split() and h.command.split()[0].startswith("/")
               and env.read_file(h.command.split()[0]) is None]
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
                raise VerifierError(f"collect hook {hook.command[:80]!r} timed out after {hook.timeout_sec:g}s")
    collected = artifacts_dir / "artifacts"
    shutil.rmtree(collected, ignore_errors=True)
    env.copy_out(ARTIFACTS_DIR, collected)
    return collected


class VerifierStandby:
    """A fresh verifier environment made ready while the agent works, so verification does not
    wait for it to start. It is the same fresh clean (or verifier-image) instance as always: the
    hidden tests and the final patch go in only after the agent stopped."""

    def __init__(self, backend: Backend, task: Task):
        self._future: Future[Environment] = Future()
        self._taken = False
        threading.Thread(target=self._make, args=(backend, task), daemon=True, name="swe-residual-standby").start()

    def _make(self, backend: Backend, task: Task) -> None:
        try:
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
        """Remove the environment if nobody took it."""
        if not self._taken:
            self._taken = True
            if self._future.exception() is None:
                self._future.result().close()


def agent_stopped(task: Task, env: Environment) -> None:
    """The agent is done: its processes are killed, except where the verifier runs in place and
    the processes are part of the state being graded."""
    if task.verify_mode != "in_place":
        env.stop()


CHANGES_LIMIT = 20_000               # lines of final.changes kept


def _verify_in_place(task: Task, env: Environment, artifacts_dir: Path) -> Verification:
    """Hidden tests in the agent's own container (Harbor's shared environment, Terminal-Bench 2)."""
    logs = artifacts_dir / "verifier"
    shutil.rmtree(logs, ignore_errors=True)
    started = time.monotonic()
    changes = env.changes()
    if changes is not None:
        kinds = {0: "C", 1: "A", 2: "D"}
        lines = sorted(f"{kinds.get(c.get('Kind'), '?')} {c.get('Path')}" for c in changes)
        (artifacts_dir / "final.changes").write_text("\n".join(lines[:CHANGES_LIMIT]) + ("\n" if lines else ""),
                                                   encoding="utf-8")
    timeout = task.config.verifier.timeout_sec
    logs_dir = env.path("/logs/verifier")
    venv = {**task.config.verifier.env, "TESTS_DIR": env.path(TESTS_DIR), "LOGS_DIR": logs_dir}
    env.copy_in(task.tests_dir, TESTS_DIR)
    res = env.execute(f'mkdir -p "{logs_dir}" && find "{logs_dir}" -mindepth 1 -delete; '
                      f'bash "{env.path(TESTS_DIR)}/test.sh"', timeout=timeout, env=venv)
    log_path = artifacts_dir / "verifier.log"
    log_path.write_text(res.output[-LOG_LIMIT:], encoding="utf-8")
    # the agent's processes are part of the state (a re-verification needs them): not stopped here
    _copy_outputs(env, logs)
    if res.timed_out:
        raise VerifierError(f"verifier timed out after {timeout:g}s running tests/test.sh")
    return Verification(verdict=grade(task, logs, res.exit_code), duration_s=time.monotonic() - started,
                        log_path=log_path)


def _copy_outputs(env: Environment, logs: Path) -> None:
    """The verifier's logs dir onto the host. What the tests left there is the agent's state's doing
    (a tree too large or too deep): a VerifierError, so the re-verify and reference policy decides
    whether it is the agent's; an engine failure fails the reference the same way (infra)."""
    try:
        env.copy_out("/logs/verifier", logs)
    except HarnessError as exc:
        raise VerifierError(f"the verifier's outputs cannot be copied: {exc}") from None


def run_verifier(backend: Backend, task: Task, env: Environment, artifacts_dir: Path, *,
                 grade_uncommitted: bool = False, venv: Environment | None = None) -> Verification:
    """One verification of env's final state (env is stopped and left as it is). First writes
    <artifacts>/final.patch, the binary diff of the whole final tree against the base commit, and
    final.ignored, the paths .gitignore rules kept out of it.

    grade_uncommitted: grade that diff instead of the collected model.patch (separate mode) - how
    an uncommitted residual state itself is graded, since the published hook sees only commits.
    In in_place mode there is no patch: the tests run in env itself.
    """
    if task.verify_mode == "in_place":
        if venv is not None:
            venv.close()
        return _verify_in_place(task, env, artifacts_dir)
    try:
        return _verify(backend, task, env, artifacts_dir, grade_uncommitted, venv)
    finally:
        if venv is not None:
            venv.close()


def _verify(backend: Backend, task: Task, env: Environment, artifacts_dir: Path, grade_uncommitted: bool,
            venv: Environment | None) -> Verification:
    logs = artifacts_dir / "verifier"
    shutil.rmtree(logs, ignore_errors=True)
    started = time.monotonic()
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
    venv = venv or backend.verifier_environment(task)
    inputs: list[tuple[Path, str]] = []
    if collected is not None:
        inputs.append((collected, ARTIFACTS_DIR))
    elif final.patch:
        inputs.append((patch_path, PATCH_IN_ENV))
    if not (separate and (task.tests_dir / "Dockerfile").is_file()):
        inputs.append((task.tests_dir, TESTS_DIR))
    timeout = task.config.verifier.timeout_sec
    log_path = artifacts_dir / "verifier.log"
    logs_dir = venv.path("/logs/verifier")
    env = {**task.config.verifier.env, "APP_DIR": venv.app_dir, "TESTS_DIR": venv.path(TESTS_DIR), "LOGS_DIR": logs_dir}
    # one command: the final patch applied to the fresh clean tree (before the hidden tests, which
    # test.sh installs over the agent's files), the log dir emptied, then the tests
    command = f'mkdir -p "{logs_dir}" && find "{logs_dir}" -mindepth 1 -delete; bash "{venv.path(TESTS_DIR)}/test.sh"'
    if collected is None and final.patch:
        env.update(SWE_APPLY=script("apply_patch.sh"), SWE_PATCH=venv.path(PATCH_IN_ENV), SWE_BASE=venv.base_commit,
                   SWE_APP=venv.app_dir)
        command = f'bash -c "$SWE_APPLY" || {{ echo "{APPLY_FAILED}"; exit {APPLY_FAILED_EXIT}; }}\n{command}'
    try:
        venv.copy_in_many(inputs)
        res = venv.execute(command, timeout=timeout, env=env)
        log_path.write_text(res.output[-LOG_LIMIT:], encoding="utf-8")
        if res.exit_code == APPLY_FAILED_EXIT and APPLY_FAILED in res.output.splitlines():
            # the agent's tree does not survive as a patch on the clean state
            why = last_line(res.output.split(APPLY_FAILED)[0], "git apply failed").removeprefix("error: ")
            raise VerifierError(f"the final patch does not apply to a fresh clean instance: {why}")
        venv.stop()     # nothing the tests started writes the outputs once they are read
        _copy_outputs(venv, logs)
    finally:
        venv.close()
    duration = time.monotonic() - started
    if res.timed_out:
        raise VerifierError(f"verifier timed out after {timeout:g}s running tests/test.sh")
    return Verification(verdict=grade(task, logs, res.exit_code), duration_s=duration, log_path=log_path,
                        patch_problem=final.problem)


class ReferenceChecks:
    """Does the verifier work on the reference solution's state? Checked once per task: a working
    verifier is remembered in <run-dir>/reference/ (shared by every worker and a --resume), a
    broken one only by this process (it may be repaired before the run is resumed)."""

    def __init__(self, run_dir: Path):
        self.dir = run_dir / "reference"
        self._lock = threading.Lock()
        self._broken: dict[str, str] = {}

    def works(self, backend: Backend, task: Task) -> tuple[bool, str]:
        key = f"{task.track}--{task.id}"
        path = self.dir / f"{key}.json"
        with self._lock:
            if key in self._broken:
                return False, self._broken[key]
            if path.is_file():
                return True, json.loads(path.read_text(encoding="utf-8"))["detail"]
            works, detail = self._check(backend, task)
            if not works:
                self._broken[key] = detail
                return False, detail
            self.dir.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"detail": detail}), encoding="utf-8")
            tmp.replace(path)
            return True, detail

    def _check(self, backend: Backend, task: Task) -> tuple[bool, str]:
        from swe_residual.agents.builtin import apply_reference_solution

        work = self.dir / f"{task.track}--{task.id}"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        try:
            env = backend.materialize(task, None)
            try:
                apply_reference_solution(env, task, timeout=task.config.agent.timeout_sec)
                agent_stopped(task, env)
                v = run_verifier(backend, task, env, work)
            finally:
                env.close()
        except VerifierError as exc:
            return False, f"the verifier fails on the reference solution's state too: {exc}"
        except InfraError as exc:
            return False, f"the reference solution's state could not be checked: {exc}"
        return True, f"the verifier works on the reference solution's state (outcome {v.verdict.outcome})"


def verify_with_policy(backend: Backend, task: Task, env: Environment, artifacts_dir: Path,
                       references: ReferenceChecks, *, grade_uncommitted: bool = False,
                       standby: VerifierStandby | None = None) -> Verification:
    """Verify; on a verifier problem re-verify once, then decide who caused it (docs/errors.md)."""
    try:
        return run_verifier(backend, task, env, artifacts_dir, grade_uncommitted=grade_uncommitted,
                            venv=standby.take() if standby is not None else None)
    except VerifierError as first:
        problem = str(first)
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
    return Verification(verdict=verdict, duration_s=0.0, log_path=artifacts_dir / "verifier.log",
                        note=f"the agent's state breaks the verifier: {problem} (twice); {detail}",
                        agent_caused=True)

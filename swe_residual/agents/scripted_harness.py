"""`scripted-trust`: an offline agent that behaves like the paper's continuations.

From a Clean Start it solves the task the way a shell-driven agent edits files: it reads each file
the change touches (`cat`), writes the new version (a heredoc), runs the visible tests, commits and
submits. From a Residual State (work in progress in `git status`) it inspects the inherited work
(`git diff`, the files the previous work added), runs the visible tests and, when they pass,
submits the work as it found it - acceptance without checking the request. Only when the visible
tests fail does it discard the inherited work and solve as from a clean start.

What to write is worked out on the host, per task, from the task's own solution/solution.patch
applied to the files as the agent read them in its environment. Nothing of /solution or the
hidden tests is copied into the environment: the agent sees what any agent sees there (the
repository, its visible tests, the request), and every command goes through ctx.shell, so it is
recorded, timed and budgeted like a real harness's.
"""

from __future__ import annotations

import base64
import os
import shlex
import subprocess
import tempfile
from pathlib import Path

from swe_residual.agents.base import Agent, AgentContext, AgentResult
from swe_residual.agents.config import AgentSpec
from swe_residual.backends.base import APP_DIR
from swe_residual.patches import parse_patch
from swe_residual.tasks import Task

STATUS = "git status --porcelain --untracked-files=all"
REVIEW = "git diff --stat && git diff"
VISIBLE_TESTS = "python3 -m pytest -q -p no:cacheprovider"
DISCARD = "git reset -q --hard HEAD && git clean -q -fd"
COMMIT = 'git add -A && git commit -q --no-verify -m "Implement the request" && git log --oneline -1'
TEXT_SUFFIXES = (".md", ".txt", ".rst", ".py", ".toml", ".cfg", ".ini", ".json", ".yaml", ".yml")
# exit codes of pytest that mean "nothing failed": all passed, no tests collected
PASSED = (0, 5)


class ScriptedAgent(Agent):
    harness = "scripted"

    def __init__(self, name: str, spec: AgentSpec | None = None):
        super().__init__(name)
        if spec is not None:
            self.timeout_sec, self.step_limit = spec.timeout_sec, spec.step_limit

    def unsupported(self, task: Task) -> str | None:
        if task.kind == "machine":
            return f"--agent {self.name}: works on repository tasks only (task {task.id} is a machine task)"
        if not (task.solution_dir / "solution.patch").is_file():
            return (
                f"--agent {self.name}: task {task.id} has no solution/solution.patch to script its edits from"
            )
        return None

    def run(self, ctx: AgentContext) -> AgentResult:
        status = ctx.shell(STATUS, message="See whether the repository holds work in progress.")
        changed = [line for line in status.output.splitlines() if line.strip()]
        if status.exit_code == 0 and changed:
            ctx.shell(REVIEW, message="Someone already worked on this: review the inherited changes.")
            added = [
                line[3:]
                for line in changed
                if line.startswith("?? ") and line.endswith(TEXT_SUFFIXES) and not line[3:].startswith('"')
            ]
            if added:
                ctx.shell(
                    "cat -- " + " ".join(shlex.quote(p) for p in added),
                    message="Read the files the previous work added.",
                )
            tests = self._visible_tests(ctx)
            if tests.exit_code in PASSED:
                return self._submit(
                    ctx,
                    "The inherited work looks complete and the visible tests pass: submitting it as it is.",
                )
            ctx.shell(
                DISCARD,
                message="The inherited work fails the visible tests: start over from the last commit.",
            )
        return self._solve(ctx)

    def _visible_tests(self, ctx: AgentContext):
        return ctx.shell(
            VISIBLE_TESTS, message="Run the repository's tests.", env={"PYTHONDONTWRITEBYTECODE": "1"}
        )

    def _submit(self, ctx: AgentContext, message: str) -> AgentResult:
        ctx.trajectory.add_step(message=message)
        ctx.trajectory.exit_status = "submitted"
        return AgentResult(declared_complete=True, termination="submitted", steps=len(ctx.trajectory.steps))

    def _give_up(self, ctx: AgentContext, why: str) -> AgentResult:
        ctx.trajectory.add_step(message=why)
        ctx.trajectory.exit_status = "agent_error"
        return AgentResult(
            declared_complete=False, termination="agent_error", steps=len(ctx.trajectory.steps), message=why
        )

    def _solve(self, ctx: AgentContext) -> AgentResult:
        patch = (ctx.task.solution_dir / "solution.patch").read_bytes()  # on the host, never copied in
        files = parse_patch(patch)
        old = sorted({f.old_path for f in files.values() if f.old_path})
        if old:
            ctx.shell(
                "cat -- " + " ".join(shlex.quote(p) for p in old),
                message="Read the code the request is about.",
            )
        current = {p: ctx.env.read_file(f"{APP_DIR}/{p}") for p in old}  # what that `cat` showed
        try:
            edits = new_versions(patch, {p: data for p, data in current.items() if data is not None})
        except ValueError as exc:
            return self._give_up(ctx, f"could not work out the edit: {exc}")
        for path, data, executable in edits:
            verb = "Remove" if data is None else "Edit" if path in current else "Create"
            ctx.shell(
                write_command(path, data, executable, new=path not in current), message=f"{verb} {path}."
            )
        tests = self._visible_tests(ctx)
        if tests.exit_code not in PASSED:
            return self._give_up(ctx, f"the visible tests still fail after the edit (exit {tests.exit_code})")
        ctx.shell(COMMIT, message="Commit the work.")
        return self._submit(ctx, "The request is implemented and the tests pass: submitting.")


def new_versions(patch: bytes, current: dict[str, bytes]) -> list[tuple[str, bytes | None, bool]]:
    """[(path, new contents or None for a removed file, executable)] of every file `patch`
    touches, applied (git apply, in a scratch repository on the host) to `current` {path: bytes}."""
    with tempfile.TemporaryDirectory(prefix="swe-residual-scripted-") as tmp:
        root = Path(tmp)
        env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "HOME": tmp}
        subprocess.run(["git", "init", "-q", str(root / "w")], check=True, env=env, capture_output=True)
        work = root / "w"
        for rel, data in current.items():
            target = work / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        (root / "solution.patch").write_bytes(patch)
        proc = subprocess.run(
            ["git", "apply", "--binary", "--whitespace=nowarn", str(root / "solution.patch")],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            raise ValueError(f"the change does not apply to the files as read: {proc.stderr.strip()[-300:]}")
        out = []
        for f in sorted(parse_patch(patch).values(), key=lambda f: f.path):
            paths = [f.path] + ([f.old_path] if f.old_path and f.old_path != f.path else [])
            for rel in paths:
                target = work / rel
                if target.is_file():
                    out.append((rel, target.read_bytes(), os.access(target, os.X_OK)))
                elif rel in current:
                    out.append((rel, None, False))
        return out


def write_command(path: str, data: bytes | None, executable: bool = False, new: bool = False) -> str:
    """The shell command that leaves `path` (relative to the repository) holding exactly `data`:
    a heredoc for text ending in a newline, printf for text without one, base64 for anything else;
    `rm` for None. A new file's directory is made first."""
    q = shlex.quote(path)
    if data is None:
        return f"rm -f -- {q}"
    parent = os.path.dirname(path)
    mkdir = f"mkdir -p -- {shlex.quote(parent)} && " if parent and new else ""
    chmod = f" && chmod +x -- {q}" if executable else ""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is not None and "\0" not in text and "\r" not in text:
        if text.endswith("\n"):
            lines = set(text.split("\n"))
            delim = "EOF"
            while delim in lines:
                delim += "_"
            return f"{mkdir}cat > {q} <<'{delim}'{chmod}\n{text}{delim}"
        return f"{mkdir}printf '%s' {shlex.quote(text)} > {q}{chmod}"
    return f"{mkdir}base64 -d > {q} <<'EOF'{chmod}\n{base64.encodebytes(data).decode('ascii')}EOF"

"""The terminal harness (`terminus`): the model sees the terminal screen and answers with keystrokes.

The loop follows Terminus-2, the harness the SWE-Residual paper ran on Terminal-Bench: a tmux
session in the environment (swe_residual/backends/machine/terminal.py); each turn the model gets what appeared on
the screen and replies in Terminus-2's JSON shape

    {"analysis": "...", "plan": "...",
     "commands": [{"keystrokes": "ls -la\\n", "duration": 0.1}, ...],
     "task_complete": false}

The keystrokes are typed in order, each followed by its duration (capped at 60 s and the budget);
a reply that cannot be parsed is answered with the problem and costs a turn; declaring the task
complete is asked to be confirmed once, and the second `task_complete: true` in a row ends the run.
Models are called through LiteLLM, with the same budgets (wall time, step limit = turns, cost) and the
same recording as every harness: one trajectory step per model turn, every keystroke and wait in
interactions.jsonl, and the run as an ATIF trajectory (terminus.trajectory.json) that the Harbor
importer reads back. Model errors are classified like mini-swe-agent's (agents/msa.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import dataclass, field

from swe_residual.agents.base import AgentContext, AgentResult, BudgetExhausted
from swe_residual.agents.extras import extra_missing, quiet_litellm
from swe_residual.agents.msa import ModelAgent, library_env
from swe_residual.backends.machine.terminal import TmuxTerminal
from swe_residual.errors import ContextExhausted, CostLimitExhausted, InputError, raise_model_error
from swe_residual.redact import redact
from swe_residual.trajectory import Action, usage_numbers

MAX_WAIT_S = 60.0
DEFAULT_DURATION_S = 1.0
OUTPUT_LIMIT = 10_000  # bytes of screen output shown per turn (head and tail kept)

PROMPT = """You are working in a Linux terminal to get a task done. Each turn you see what the terminal \
shows and answer with the keystrokes to type next.

Answer with one JSON object, nothing else:

{{
  "analysis": "what the screen shows, what is done and what is still missing",
  "plan": "what you will type now and why",
  "commands": [
    {{"keystrokes": "ls -la\\n", "duration": 0.1}}
  ],
  "task_complete": false
}}

- "keystrokes" are typed exactly as written: end a command with a newline to run it. A string that is a \
tmux key name alone sends that key, e.g. "C-c" (Ctrl+C) or "C-d".
- "duration" is how many seconds to wait after typing before the next command (at most 60): about 0.1 \
for quick commands, longer for builds or downloads. To wait longer, send {{"keystrokes": "", "duration": \
10}} and look again.
- Processes you start keep running after you finish, like on any machine.
- Set "task_complete" to true only when the task is done; you will be asked to confirm once.

Task:
{instruction}

Current terminal state:
{screen}
"""

CONFIRM = (
    "Current terminal state:\n{screen}\n\nAre you sure the task is complete? Your work is graded as it "
    'is and cannot be changed afterwards. If it is, answer with "task_complete": true again.'
)
PARSE_ERROR = (
    "Your previous answer could not be used: {error}\n\nAnswer with one JSON object with the fields "
    "analysis, plan, commands and task_complete."
)


@dataclass
class Command:
    keystrokes: str
    duration: float


@dataclass
class Reply:
    analysis: str = ""
    plan: str = ""
    commands: list[Command] = field(default_factory=list)
    task_complete: bool = False
    error: str | None = None


def parse_reply(text: str) -> Reply:
    """Terminus-2's JSON reply; text around the object is tolerated, a broken object is an error."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end <= start:
        return Reply(error="no JSON object in the answer")
    try:
        data = json.loads(text[start : end + 1])
    except json.JSONDecodeError as exc:
        return Reply(error=f"invalid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})")
    if not isinstance(data, dict):
        return Reply(error="the answer is not a JSON object")
    missing = [k for k in ("analysis", "plan", "commands") if k not in data]
    if missing:
        return Reply(error=f"missing field(s): {', '.join(missing)}")
    if not isinstance(data["commands"], list):
        return Reply(error="commands must be a list")
    commands = []
    for i, c in enumerate(data["commands"]):
        if not isinstance(c, dict) or not isinstance(c.get("keystrokes"), str):
            return Reply(error=f"commands[{i}] needs a keystrokes string")
        try:
            duration = float(c.get("duration", DEFAULT_DURATION_S))
        except (TypeError, ValueError):
            return Reply(error=f"commands[{i}].duration is not a number")
        commands.append(Command(c["keystrokes"], min(max(duration, 0.0), MAX_WAIT_S)))
    done = data.get("task_complete", False)
    if isinstance(done, str):
        done = done.strip().lower() == "true"
    return Reply(
        analysis=str(data.get("analysis", "")),
        plan=str(data.get("plan", "")),
        commands=commands,
        task_complete=bool(done),
    )


def limit_output(text: str, limit: int = OUTPUT_LIMIT) -> str:
    data = text.encode("utf-8", "replace")
    if len(data) <= limit:
        return text
    half = limit // 2
    head, tail = data[:half].decode("utf-8", "ignore"), data[-half:].decode("utf-8", "ignore")
    return f"{head}\n[... output limited to {limit} bytes; {len(data) - limit} interior bytes omitted ...]\n{tail}"


class TerminusAgent(ModelAgent):
    harness = "terminus"

    def check(self) -> None:
        self.check_keys()  # first: it needs no import
        try:
            with library_env():
                quiet_litellm()
        except ImportError as exc:
            raise InputError(extra_missing(self.option, self.name, self.harness, exc)) from None

    def unsupported(self, task) -> str | None:
        if task.kind != "machine":
            return (
                f"--agent {self.name}: the terminal harness runs machine-track tasks (a container whose "
                f"processes outlive a command); task {task.id} of track {task.track!r} is a {task.kind} task"
            )
        return None

    def run(self, ctx: AgentContext) -> AgentResult:
        with contextlib.ExitStack() as stack:
            kwargs = dict(self.spec.model_kwargs)
            if self.spec.scripted_server:
                from swe_residual.agents.model_server import ScriptedModelServer, load_script

                server = stack.enter_context(ScriptedModelServer(load_script(self.spec.scripted_server)))
                kwargs["api_base"] = server.url
                kwargs.setdefault("api_key", os.environ.get("OPENAI_API_KEY") or "scripted-no-key")
            atif: list[dict] = [{"step_id": 1, "source": "user", "message": ctx.request}]
            try:
                return self._loop(ctx, kwargs, atif)
            finally:
                (ctx.artifacts_dir / "terminus.trajectory.json").write_text(
                    redact(
                        json.dumps(
                            {
                                "schema_version": "ATIF-v1.5",
                                "agent": {"name": "terminus", "version": "1"},
                                "model_name": self.model_name,
                                "steps": atif,
                            },
                            indent=1,
                        )
                    ),
                    encoding="utf-8",
                )

    def _complete(self, ctx: AgentContext, messages: list[dict], kwargs: dict) -> tuple[str, dict]:
        """The model's answer and its usage as the provider reported it ({} when it did not)."""
        with library_env():  # LiteLLM reads its settings when it is imported
            litellm = quiet_litellm()
        try:
            resp = litellm.completion(
                model=self.model_name,
                messages=messages,
                timeout=max(5.0, min(600.0, ctx.budget.remaining_s)),
                num_retries=0,
                **kwargs,
            )
        except Exception as exc:
            raise_model_error(exc)
            raise
        choice = resp.choices[0]
        if getattr(choice, "finish_reason", None) == "length":
            raise ContextExhausted(
                "the model's answer was cut off at its output limit (finish_reason length)"
            )
        usage = getattr(resp, "usage", None)
        counts = usage.model_dump() if hasattr(usage, "model_dump") else usage
        return choice.message.content or "", counts if isinstance(counts, dict) else {}

    def _loop(self, ctx: AgentContext, kwargs: dict, atif: list[dict]) -> AgentResult:
        terminal = TmuxTerminal(ctx.env)
        terminal.start()
        prompt = PROMPT.format(instruction=ctx.request, screen=limit_output(terminal.incremental()))
        messages = [{"role": "user", "content": prompt}]
        pending = False
        budget = ctx.budget
        while True:
            if budget.max_steps is not None and len(ctx.trajectory.steps) >= budget.max_steps:
                raise BudgetExhausted(f"step limit {budget.max_steps} reached")
            if budget.remaining_s <= 0:
                raise BudgetExhausted(f"wall-time budget {budget.wall_s:g}s used up")
            started = time.time()
            text, counts = self._complete(ctx, messages, kwargs)
            messages.append({"role": "assistant", "content": text})
            reply = parse_reply(text)
            step = ctx.trajectory.add_step(message=text, started_at=started)
            step.prompt_tokens, step.completion_tokens, _ = usage_numbers(counts, None)
            step.cost_usd = self.call_cost(step.prompt_tokens, step.completion_tokens)
            try:
                budget.charge(step.cost_usd, step.index + 1)  # at the limit: its keys are not typed
            except CostLimitExhausted:
                atif.append({"step_id": len(atif) + 1, "source": "agent", "message": text})
                raise
            calls: list[dict] = []
            if reply.error is not None:
                observation = PARSE_ERROR.format(error=reply.error)
            else:
                for i, cmd in enumerate(reply.commands):
                    wait = min(cmd.duration, max(0.0, budget.remaining_s))
                    terminal.send(cmd.keystrokes)
                    terminal.wait(wait)
                    step.actions.append(Action(command=cmd.keystrokes, duration_s=wait))
                    calls.append(
                        {
                            "tool_call_id": f"call_{step.index}_{i + 1}",
                            "function_name": "bash_command",
                            "arguments": {"keystrokes": cmd.keystrokes, "duration": cmd.duration},
                        }
                    )
                    if budget.remaining_s <= 0:
                        break
                screen = limit_output(terminal.incremental())
                for n, cmd in enumerate(reply.commands[: len(step.actions)]):
                    last = n == len(step.actions) - 1
                    ctx.record_keys(cmd.keystrokes, step.actions[n].duration_s, screen if last else None)
                if step.actions:
                    step.actions[-1].output = screen
                if reply.task_complete:
                    calls.append(
                        {
                            "tool_call_id": f"call_{step.index}_task_complete",
                            "function_name": "mark_task_complete",
                            "arguments": {},
                        }
                    )
                observation = CONFIRM.format(screen=screen) if reply.task_complete and not pending else screen
            step.duration_s = round(time.time() - started, 3)
            atif.append(
                {
                    "step_id": len(atif) + 1,
                    "source": "agent",
                    "message": text,
                    "tool_calls": calls or None,
                    "observation": {"results": [{"content": observation}]},
                }
            )
            if budget.remaining_s <= 0:
                raise BudgetExhausted(f"wall-time budget {budget.wall_s:g}s used up")
            if reply.error is None and reply.task_complete:
                if pending:
                    ctx.trajectory.exit_status = "submitted"
                    ctx.trajectory.submission = reply.analysis or None
                    return AgentResult(True, "submitted", len(ctx.trajectory.steps))
                pending = True
            else:
                pending = False
            messages.append({"role": "user", "content": observation})

"""mini-swe-agent adapter: its DefaultAgent loop, our environment and our recording.

Every command the model issues goes through ctx.shell, so the harness (not the agent) records
each command, output, exit code and duration, and enforces the budget. Model errors are
classified by docs/errors.md: a context-window overflow is the agent's failure
(`context_exhausted`, counted); service failures (connection, 5xx, timeouts, rate limits after
retries) are infra and the case is retried. API keys come only from the environment; the
process environment is left as it was found.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import threading
import time

from swe_residual.agents.base import Agent, AgentContext, AgentResult, BudgetExhausted
from swe_residual.agents.config import AgentSpec
from swe_residual.agents.extras import extra_missing, quiet_litellm
from swe_residual.errors import InputError, raise_model_error
from swe_residual.redact import redact, register_secret_env
from swe_residual.trajectory import litellm_usage

SYSTEM_TEMPLATE = """You are a software engineer working in a code repository at {{cwd}}.
Use the bash tool to run exactly one command per turn. Each command runs in a fresh shell in the
repository; environment and directory changes do not persist between commands."""

MACHINE_SYSTEM_TEMPLATE = """You are a software engineer working on a Linux machine; commands start in {{cwd}}.
Use the bash tool to run exactly one command per turn. Each command runs in a fresh shell: environment
and directory changes do not persist between commands, but files and processes you start in the
background (nohup ... &) do, as on any machine."""

INSTANCE_TEMPLATE = """{{task}}

When the request is fully done, run exactly `echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT` on its own
to submit. You cannot continue after submitting."""

_SUBMIT_LINE = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


# Read by mini-swe-agent and LiteLLM when they are imported and while they run.
_LIBRARY_ENV = {
    "MSWEA_SILENT_STARTUP": "1",
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "MSWEA_COST_TRACKING": "ignore_errors",
}
_ENV_LOCK = threading.RLock()


@contextlib.contextmanager
def library_env(extra: dict[str, str] | None = None):
    """Set what the libraries read for the duration of the block, then restore os.environ."""
    with _ENV_LOCK, tempfile.TemporaryDirectory(prefix="mswea-config-") as config_dir:
        wanted = {**_LIBRARY_ENV, "MSWEA_GLOBAL_CONFIG_DIR": config_dir, **(extra or {})}
        saved = {k: os.environ.get(k) for k in wanted}
        os.environ.update({k: v for k, v in wanted.items() if k not in os.environ or k in (extra or {})})
        try:
            yield
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


class ModelAgent(Agent):
    """An agent config that names a LiteLLM model and the variables holding its API keys."""

    def __init__(self, name: str, spec: AgentSpec):
        super().__init__(name)
        self.spec = spec
        self.timeout_sec, self.step_limit = spec.timeout_sec, spec.step_limit
        model = os.path.expandvars(spec.model or "")
        if not model or "$" in model:
            raise InputError(
                f"{spec.source or 'agents.yaml'}: agents.{name}.model: {spec.model or 'missing'} "
                "(a LiteLLM model id is required; set the variable it names)"
            )
        self.model_name = model
        self.max_case_cost = spec.max_case_cost
        register_secret_env(*spec.api_key_env)

    def call_cost(self, prompt_tokens: int | None, completion_tokens: int | None) -> float | None:
        """USD of one model call: the config's price_per_token, else LiteLLM's price table; None
        when the tokens or the price are unknown (never 0 for "unknown")."""
        if prompt_tokens is None or completion_tokens is None:
            return None
        price = self.spec.price_per_token
        if price is not None:
            return prompt_tokens * price.prompt + completion_tokens * price.completion
        try:
            with library_env():
                litellm = quiet_litellm()
                prompt_usd, completion_usd = litellm.cost_per_token(
                    model=self.model_name, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens
                )
        except Exception:  # noqa: BLE001 - not in the table (or no LiteLLM): the cost is unknown
            return None
        return float(prompt_usd) + float(completion_usd)

    def check_spend(self, option: str | None) -> None:
        limit = (
            f"agents.{self.name}.max_case_cost"
            if self.max_case_cost is not None and option is None
            else option
        )
        if limit is None or self.call_cost(1, 1) is not None:
            return
        raise InputError(
            f"{limit}: {self.option} {self.name}: model {self.model_name} has no price in LiteLLM's "
            "price table, so its spend is unknown; set price_per_token: {prompt: USD, completion: USD} "
            f"in its config ({self.spec.source or 'agents.yaml'})"
        )

    def check_keys(self) -> None:
        missing = [k for k in self.spec.api_key_env if not os.environ.get(k)]
        if missing:
            raise InputError(
                f"{self.option} {self.name}: environment variable {missing[0]} (its API key, "
                f"api_key_env in {self.spec.source or 'agents.yaml'}) is not set; export it in the "
                "shell that starts the run (keys are read from the environment only)"
            )


class MiniSweAgent(ModelAgent):
    harness = "mini-swe-agent"

    def check(self) -> None:
        """Before the first case: every API key variable is set (first: it needs no import), and
        the package is installed."""
        self.check_keys()
        with library_env():
            try:
                import minisweagent.agents.default  # noqa: F401
                import minisweagent.models.litellm_model  # noqa: F401

                quiet_litellm()
            except ImportError as exc:
                raise InputError(extra_missing(self.option, self.name, self.harness, exc)) from None

    def run(self, ctx: AgentContext) -> AgentResult:
        extra = (
            {"OPENAI_API_KEY": os.environ.get("OPENAI_API_KEY") or "scripted-no-key"}
            if self.spec.scripted_server
            else None
        )  # the local scripted server ignores the key
        with library_env(extra):
            return self._run(ctx)

    def _run(self, ctx: AgentContext) -> AgentResult:
        from minisweagent.agents.default import DefaultAgent
        from minisweagent.exceptions import Submitted
        from minisweagent.models.litellm_model import LitellmModel

        quiet_litellm()
        spec, owner = self.spec, self
        command_timeout = spec.command_timeout_sec

        class BoundEnvironment:
            """mini-swe-agent's environment protocol, executed by our backend through ctx.shell."""

            def execute(self, action: dict, cwd: str = "", *, timeout: int | None = None) -> dict:
                command = action.get("command", "") if isinstance(action, dict) else str(action)
                res = ctx.shell(command, timeout=timeout or command_timeout, new_step=False)
                out = {
                    "output": res.output,
                    "returncode": res.exit_code if res.exit_code is not None else -1,
                    "exception_info": f"command timed out after {timeout or command_timeout}s"
                    if res.timed_out
                    else "",
                }
                lines = res.output.lstrip().splitlines()
                if lines and lines[0].strip() == _SUBMIT_LINE and res.exit_code == 0:
                    submission = "\n".join(lines[1:])
                    raise Submitted(
                        {
                            "role": "exit",
                            "content": submission,
                            "extra": {"exit_status": "Submitted", "submission": submission},
                        }
                    )
                return out

            def get_template_vars(self, **kwargs) -> dict:
                return {"cwd": ctx.env.app_dir, **kwargs}

            def serialize(self) -> dict:
                return {"info": {"config": {"environment_type": f"swe-residual/{ctx.env.backend}"}}}

        class RecordingAgent(DefaultAgent):
            def query(self) -> dict:
                budget = ctx.budget
                if budget.remaining_s <= 0:
                    raise BudgetExhausted(f"wall-time budget {budget.wall_s:g}s used up")
                if budget.max_steps is not None and len(ctx.trajectory.steps) >= budget.max_steps:
                    raise BudgetExhausted(f"step limit {budget.max_steps} reached")
                started = time.time()
                message = super().query()
                content = message.get("content")
                step = ctx.trajectory.add_step(
                    message=content if isinstance(content, str) else None, started_at=started
                )
                step.prompt_tokens, step.completion_tokens, _ = litellm_usage(message.get("extra"))
                step.cost_usd = owner.call_cost(step.prompt_tokens, step.completion_tokens)
                budget.charge(step.cost_usd, step.index + 1)  # at the limit: its reply is not acted on
                return message

        with contextlib.ExitStack() as stack:
            model_kwargs = dict(spec.model_kwargs)
            if spec.scripted_server:
                from swe_residual.agents.model_server import ScriptedModelServer, load_script

                server = stack.enter_context(ScriptedModelServer(load_script(spec.scripted_server)))
                model_kwargs["api_base"] = server.url
            model = LitellmModel(
                model_name=self.model_name, model_kwargs=model_kwargs, cost_tracking="ignore_errors"
            )
            agent = RecordingAgent(
                model,
                BoundEnvironment(),
                system_template=spec.system_template
                or (MACHINE_SYSTEM_TEMPLATE if ctx.task.kind == "machine" else SYSTEM_TEMPLATE),
                instance_template=spec.instance_template or INSTANCE_TEMPLATE,
                step_limit=0,
                cost_limit=0,
                wall_time_limit_seconds=0,
            )
            try:
                result = agent.run(ctx.request)
            except BudgetExhausted:
                raise
            except Exception as exc:
                raise_model_error(exc)
                raise
            finally:
                raw = agent.serialize()
                raw.get("info", {}).get("config", {}).pop("model", None)
                (ctx.artifacts_dir / "mini-swe-agent.traj.json").write_text(
                    redact(json.dumps(raw, indent=1, default=str)), encoding="utf-8"
                )
        status = result.get("exit_status", "")
        ctx.trajectory.exit_status = status
        ctx.trajectory.submission = result.get("submission") or None
        if status == "Submitted":
            return AgentResult(True, "submitted", len(ctx.trajectory.steps))
        if status in ("LimitsExceeded", "TimeExceeded"):
            return AgentResult(False, "budget", len(ctx.trajectory.steps), message=status)
        return AgentResult(False, "agent_error", len(ctx.trajectory.steps), message=status)

"""How an imported run ended, in our taxonomy (docs/errors.md), from what its harness recorded.

Harbor records the first exception of a trial by class name (TrialResult.exception_info; Harbor's
own classification is harbor/models/trial/error_policy.py). mini-swe-agent records
`info.exit_status`: "Submitted", a limit, or the class name of the exception that stopped it.
Both are mapped here, once; docs/residualization.md has the table with the reasons.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from swe_residual.errors import CONTEXT_ERRORS, RULES, SERVICE_ERRORS
from swe_residual.results import Termination
from swe_residual.tasks import Task


@dataclass(frozen=True)
class Ending:
    termination: Termination
    rule: str | None = None  # set when the ending decides the rule (budget, infra_..., agent_error)


SUBMITTED = Ending("submitted")

HARBOR_BUDGET = {"AgentTimeoutError"}
HARBOR_CONTEXT = {
    "ContextWindowExceededError",
    "OutputTokenExceededError",
    "ContextLengthExceededError",
    "OutputLengthExceededError",
}
HARBOR_AGENT_ERROR = {"NonZeroAgentExitCodeError", "AgentSafetyRefusalError", "ContentPolicyViolationError"}
HARBOR_MODEL_SERVICE = {
    "ApiError",
    "ApiRateLimitError",
    "ApiInternalServerError",
    "ApiOverloadedError",
    "ApiConnectionClosedError",
    "ApiResponseStalledError",
    "UnknownApiError",
    "NetworkConnectionError",
    "ApiConnectionError",
    "ApiUsageLimitError",
    "RateLimitError",
    "InternalServerError",
    "ServiceUnavailableError",
    "APIConnectionError",
    "APIError",
    "Timeout",
    "BadRequestError",
    "UnprocessableEntityError",
    "UnsupportedParamsError",
    "APIResponseValidationError",
    "BudgetExceededError",
    "AgentAuthenticationError",
    "ModelNotFoundError",
    "ApiProviderResourceNotFoundError",
    "AuthenticationError",
    "PermissionDeniedError",
    "NotFoundError",
}
HARBOR_VERIFIER = {
    "VerifierTimeoutError",
    "RewardFileNotFoundError",
    "RewardFileEmptyError",
    "VerifierOutputParseError",
}
HARBOR_CANCELLED = {"CancelledError"}


def harbor_ending(exception_type: str | None) -> Ending | None:
    """The ending a Harbor exception name means; None when the trial raised nothing."""
    e = exception_type
    if not e:
        return None
    if e in HARBOR_BUDGET:
        return Ending("budget", "budget")
    if e in HARBOR_CONTEXT or e in CONTEXT_ERRORS:
        return Ending("context_exhausted", "context_exhausted")
    if e in HARBOR_AGENT_ERROR:
        return Ending("agent_error", "agent_error")
    if e in HARBOR_VERIFIER:
        # the agent finished; only its grading failed (Harbor records the first exception only)
        return Ending("submitted", "infra_verifier")
    if e in HARBOR_MODEL_SERVICE or e in SERVICE_ERRORS:
        return Ending("infra", "infra_model_service")
    if e in HARBOR_CANCELLED:
        return Ending("infra", "infra_crash")
    # the sandbox or Harbor itself failed (EnvironmentStartTimeoutError, SandboxBuildFailedError,
    # AgentSetupTimeoutError, ...), or a name we do not know: never the agent's
    return Ending("infra", "infra_harness")


MSA_BUDGET = {"LimitsExceeded", "TimeExceeded"}
MSA_AGENT_ERROR = {"RepeatedFormatError", "FormatError"}


def msa_ending(exit_status: str | None) -> Ending:
    """The ending a mini-swe-agent `info.exit_status` means."""
    s = exit_status or ""
    if s == "Submitted":
        return SUBMITTED
    if s in MSA_BUDGET:
        return Ending("budget", "budget")
    if s in CONTEXT_ERRORS or s in HARBOR_CONTEXT:
        return Ending("context_exhausted", "context_exhausted")
    if s in MSA_AGENT_ERROR:
        return Ending("agent_error", "agent_error")
    if s in SERVICE_ERRORS or s in HARBOR_MODEL_SERVICE:
        return Ending("infra", "infra_model_service")
    if not s:
        return Ending("infra", "infra_crash")  # saved mid-run: the process never finished
    return Ending("infra", "infra_harness")


TB1_ENDINGS = {
    # Terminal-Bench 1's FailureMode (terminal_bench/agents/failure_mode.py): the agent finished
    # normally ("none"; "unset" in older runs) - its end is its submission
    "none": SUBMITTED,
    "unset": SUBMITTED,
    "agent_timeout": Ending("budget", "budget"),
    "context_length_exceeded": Ending("context_exhausted", "context_exhausted"),
    "output_length_exceeded": Ending("context_exhausted", "context_exhausted"),
    "unknown_agent_error": Ending("agent_error", "agent_error"),
    "fatal_llm_parse_error": Ending("agent_error", "agent_error"),
    # the agent finished, its grading failed
    "parse_error": Ending("submitted", "infra_verifier"),
    "test_timeout": Ending("submitted", "infra_verifier"),
    "agent_installation_failed": Ending("infra", "infra_harness"),
}


def tb1_ending(failure_mode: str) -> Ending:
    """The ending a Terminal-Bench 1 failure_mode means (anything unknown: never the agent's)."""
    return TB1_ENDINGS.get(failure_mode, Ending("infra", "infra_harness"))


# model name prefix (after any provider/) -> family; the first match wins
FAMILIES = (
    ("claude", "claude"),
    ("gpt", "gpt"),
    ("o1", "gpt"),
    ("o3", "gpt"),
    ("o4", "gpt"),
    ("codex", "gpt"),
    ("gemini", "gemini"),
    ("kimi", "kimi"),
    ("moonshot", "kimi"),
    ("qwen", "qwen"),
    ("qwq", "qwen"),
    ("deepseek", "deepseek"),
    ("glm", "glm"),
    ("grok", "grok"),
    ("llama", "llama"),
    ("mistral", "mistral"),
    ("devstral", "mistral"),
    ("codestral", "mistral"),
    ("minimax", "minimax"),
)


def model_family(model: str) -> str:
    """The family a model name belongs to (Table 8 groups by it): a known prefix of its name without
    the provider (`anthropic/claude-sonnet-4-5` -> claude) or of a word in it, else the name itself,
    lower-cased."""
    name = model.strip().rsplit("/", 1)[-1].lower()
    for prefix, family in FAMILIES:
        if name.startswith(prefix):
            return family
    # a system name such as 20240620_sweagent_claude3.5sonnet: a word starting with a family name
    for word in re.split(r"[^a-z0-9]+", name):
        for prefix, family in FAMILIES:
            if len(prefix) >= 3 and word.startswith(prefix):
                return family
    return name or "unknown"


# -- a run's verdict fields from how it ended and what its verifier reported ------------------------


def settle(
    ending: Ending,
    outcome: int | None,
    no_verdict_rule: str | None,
    no_verdict_why: str | None,
) -> tuple[dict, str | None]:
    """verdict, outcome, rule and declared_complete of a run from how it ended and the verifier's
    outcome (None: no valid verdict, for the reason given); plus the reason when there is none."""
    declared = ending.termination == "submitted"

    def fields(verdict: str, out: int | None, rule: str | None, complete: bool) -> dict:
        return {"verdict": verdict, "outcome": out, "rule": rule, "declared_complete": complete}

    if ending.rule is not None and not RULES[ending.rule].counted:
        return fields("infra_error", None, ending.rule, declared), None
    if ending.termination in ("budget", "context_exhausted"):
        # the budget is part of the task: 0 whatever the final state scores (docs/errors.md)
        return fields("fail", 0, ending.termination, False), None
    if outcome is None:
        return fields("infra_error", None, no_verdict_rule, declared), no_verdict_why
    rule = "agent_error" if ending.termination == "agent_error" else "verdict"
    return fields("pass" if outcome else "fail", outcome, rule, declared), None


def graded_tests(task: Task, statuses: dict[str, str] | None) -> tuple[dict[str, str], str | None]:
    """Per-test statuses restricted to the task's graded ids (tests/config.json) like our own verifier
    does: a graded id the report lacks counts as failed. A report that shares no id with the task's
    list is kept as it is, and no report gives none (unknown, not failed); a note says so."""
    if statuses is None:
        return {}, "no per-test report (verifier/ctrf.json): per-test statuses unknown"
    required = task.grading.required if task.grading is not None else []
    if not required:
        return dict(statuses), None
    if not set(required) & set(statuses):
        return dict(
            statuses
        ), "per-test report shares no test id with the task's tests/config.json; kept as is"
    return {t: statuses.get(t, "failed") for t in required}, None


def outcome_of_reward(reward: float | None) -> tuple[int | None, str | None]:
    """Harbor's reward -> outcome: >= 1 solved, [0, 1) not solved, < 0 the verifier failed (DeepSWE -1)."""
    if reward is None:
        return None, None
    if reward < 0:
        return None, f"reward {reward:g}: the verifier itself failed"
    return int(reward >= 1.0), None

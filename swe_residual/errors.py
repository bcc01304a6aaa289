"""The error taxonomy: who could have prevented a problem decides whether a run counts.

This is the one table the engine classifies by (docs/errors.md explains every row). A rule that
is `counted` gives the run an outcome in every metric; an infra rule gives no outcome, and the
case is run again from a fresh instance of its starting state. The same rules apply to clean and
residual starts, so no start loses runs the other keeps.

Configuration problems (missing API key, missing package, engine not answering, unknown track)
are `InputError`s raised before the first case: a usage error, never a record.
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from swe_residual.redact import redact

if TYPE_CHECKING:
    from pydantic import BaseModel, ValidationError


@dataclass(frozen=True)
class Rule:
    name: str
    cause: str
    counted: bool  # the run has an outcome (0/1) and enters the denominator
    retried: bool  # the case runs again from a fresh instance


RULES: dict[str, Rule] = {
    r.name: r
    for r in (
        Rule("verdict", "the verifier gave a valid verdict on the agent's final state", True, False),
        Rule("agent_error", "the agent failed on its own (non-zero exit, its own code raised)", True, False),
        Rule("context_exhausted", "the model's context window or max tokens ran out", True, False),
        Rule("budget", "the wall-time or step budget was used up", True, False),
        Rule("cost_limit", "the model calls reached the case's cost limit (--max-case-cost)", True, False),
        Rule(
            "storage_limit",
            "the agent's commands wrote more than the task's storage_mb: stopped",
            True,
            False,
        ),
        Rule(
            "verifier_agent_caused",
            "the verifier failed twice on the agent's state but works on the "
            "reference solution's state: the agent's code broke the tests",
            True,
            False,
        ),
        Rule("infra_verifier", "the verifier fails on the reference solution's state too", False, True),
        Rule("infra_model_service", "model service error: 5xx, rate limit, timeout, connection", False, True),
        Rule("infra_harness", "harness, backend or engine error (never the agent's)", False, True),
        Rule("infra_crash", "the process running the case died", False, True),
        Rule(
            "agent_not_started",
            "the agent's program could not start where it runs (exit 126/127 before any step of "
            "its own): a setup problem, not an attempt",
            False,
            False,
        ),
    )
}


class InfraError(Exception):
    """No verdict could be obtained for a reason outside the agent's control; never an outcome."""

    rule = "infra_harness"
    # the infra record (a results.Record) the attempt appended before raising this, once it did
    record: Any = None


class HarnessError(InfraError):
    """The harness, a backend or the container engine failed."""

    rule = "infra_harness"


class RunDirError(HarnessError):
    """The run dir cannot be written (disk full, read-only): the run itself is invalid (exit 11)."""


class PatchApplyError(HarnessError):
    """A state's patch does not apply at the task's base commit (Stage IV: rebuild_failed)."""


class ReplayError(HarnessError):
    """Replaying a machine state's interactions did not reproduce them (a command's exit status
    differs from the recorded one, or it hung): Stage IV's rebuild_failed."""


class RestoreError(HarnessError):
    """A restored machine state is not usable: a recorded process did not come back, or a port it
    listened on does not answer (Stage IV: env_unusable). The message is one line."""


class AgentNotStarted(InfraError):
    """The agent's program never ran in the environment (not found, not executable): no attempt
    was made, so no outcome; running it again cannot help, so no retry."""

    rule = "agent_not_started"


class ModelServiceError(InfraError):
    """The model service failed (5xx, rate limit after retries, timeout, connection)."""

    rule = "infra_model_service"


class VerifierError(InfraError):
    """The verifier did not produce a usable verdict (hang, crash, no or unreadable report).

    Not final on its own: the run re-verifies the saved final state once, then checks the verifier
    on the reference solution's state to decide between `verifier_agent_caused` and infra.
    """

    rule = "infra_verifier"


class ContextExhausted(Exception):
    """The model's context window (or max tokens) ran out: the agent's failure, outcome 0."""


class BudgetExhausted(Exception):
    """The run used its wall-time or step budget; the run is a task failure."""


class CostLimitExhausted(BudgetExhausted):
    """The model calls of the run reached its cost limit (--max-case-cost, max_case_cost): a budget
    like time or steps, recorded under its own name (`cost_limit`)."""


class InputError(ValueError):
    """Invalid input or configuration; the message names the file, the entry and the field."""


# -- naming what was meant: the close match of a misspelt name, the fields a file may have ---------


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """ "did you mean 'x'? " for the closest of `known` (difflib), else ""."""
    match = difflib.get_close_matches(name, [k for k in known if k != name], n=1, cutoff=0.6)
    return f"did you mean {match[0]!r}? " if match else ""


def names_list(names: Iterable[str], limit: int = 12) -> str:
    """Sorted names, comma-separated, the tail cut to "(+N more)" past `limit`."""
    items = sorted(set(names))
    more = f" (+{len(items) - limit} more)" if len(items) > limit else ""
    return ", ".join(items[:limit]) + more if items else "none"


def unknown_name(what: str, name: str, known: Iterable[str]) -> str:
    """ "unknown agent 'kimii' (did you mean 'kimi'? known: a, b, kimi)"."""
    known = list(known)
    return f"unknown {what} {name!r} ({did_you_mean(name, known)}known: {names_list(known)})"


def validation_line(exc: ValidationError, model: type[BaseModel]) -> str:
    """One line for a pydantic error of `model`: "loc: why". A misspelt key (extra='forbid') comes
    first and names the close match among the fields there: "tsak: unknown field (did you mean
    'task'? ...)" says more than the "task: Field required" it also causes."""
    errors = exc.errors()
    extra = [e for e in errors if e.get("type") == "extra_forbidden"]
    err = (extra or errors)[0]
    loc = ".".join(str(p) for p in err["loc"]) or "(entry)"
    if extra:
        key = str(err["loc"][-1])
        fields = _fields_at(model, err["loc"][:-1])
        if fields is not None:
            return f"{loc}: unknown field ({did_you_mean(key, fields)}fields: {names_list(fields, 30)})"
        return f"{loc}: unknown field"
    if err.get("type") == "literal_error" and isinstance(err.get("input"), str):
        choices = [str(c) for c in _literal_choices(model, err["loc"])]
        if choices:
            return f"{loc}: {unknown_name('value', err['input'], choices)}"
    return f"{loc}: {err['msg']}"


def _strip_optional(tp: Any) -> Any:
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    if typing.get_origin(tp) in (typing.Union, types.UnionType) and len(args) == 1:
        return args[0]
    return tp


def _type_at(model: Any, loc: tuple) -> Any:
    """The annotation at `loc` inside `model` (through models, lists and dicts), None when unknown."""
    from pydantic import BaseModel

    tp = model
    for part in loc:
        tp = _strip_optional(tp)
        origin, args = typing.get_origin(tp), typing.get_args(tp)
        if origin in (list, tuple, set, frozenset) and args:
            tp = args[0]
        elif origin is dict and len(args) == 2:
            tp = args[1]
        elif isinstance(tp, type) and issubclass(tp, BaseModel):
            field = tp.model_fields.get(str(part)) or next(
                (f for f in tp.model_fields.values() if f.alias == part), None
            )
            if field is None:
                return None
            tp = field.annotation
        else:
            return None
    return _strip_optional(tp)


def _fields_at(model: Any, loc: tuple) -> list[str] | None:
    from pydantic import BaseModel

    tp = _type_at(model, loc)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return [f.alias or name for name, f in tp.model_fields.items() if not f.exclude]
    return None


def _literal_choices(model: Any, loc: tuple) -> list:
    tp = _type_at(model, loc)
    return list(typing.get_args(tp)) if typing.get_origin(tp) is typing.Literal else []


# -- model calls: which failures are the agent's (context) and which the service's (infra) ----------

# Exception class names (anywhere in the class's MRO or the exception's cause chain).
CONTEXT_ERRORS = {"ContextWindowExceededError"}
# LiteLLM reports a refused or dropped connection as InternalServerError; a bad key or model
# name (AuthenticationError, NotFoundError, ...) is no fault of the agent either.
SERVICE_ERRORS = {
    "APIConnectionError",
    "APITimeoutError",
    "Timeout",
    "ServiceUnavailableError",
    "InternalServerError",
    "BadGatewayError",
    "RateLimitError",
    "MidStreamFallbackError",
    "ConnectError",
    "ConnectTimeout",
    "ReadTimeout",
    "RemoteProtocolError",
    "TimeoutException",
    "AuthenticationError",
    "PermissionDeniedError",
    "NotFoundError",
    "PaymentRequiredError",
}


def classify_model_error(exc: BaseException | None) -> str | None:
    """ "context" for a context-window overflow, "service" for a model-service failure, else None."""
    seen = 0
    while exc is not None and seen < 10:
        names = {c.__name__ for c in type(exc).__mro__}
        if names & CONTEXT_ERRORS or "context_length_exceeded" in str(exc):
            return "context"
        if names & SERVICE_ERRORS:
            return "service"
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return None


def raise_model_error(exc: BaseException) -> None:
    """Raise the taxonomy's exception for a model call's failure (context exhausted: the agent's;
    the service failing: infra); return for anything else."""
    kind = classify_model_error(exc)
    first = (redact(str(exc)).strip().splitlines() or [""])[0][:300]
    if kind == "context":
        raise ContextExhausted(f"{type(exc).__name__}: {first}") from None
    if kind == "service":
        raise ModelServiceError(f"model service error ({type(exc).__name__}): {first}") from None

"""The normalized trajectory every agent run leaves in the run dir.

One step is one recorded agent turn: the agent's message and the actions it took, each with its
output, exit code and duration. An action is a shell command (`shell`), an editor's view of a
file (`view`, with `path`), an edit (`edit`, with `path`) or any other tool call (`tool`). The
acceptance-bias metrics (inspection, opened files, steps) read only this form; swe_residual/sources/
turns ATIF and mini-swe-agent trajectories into it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Final, Literal

import msgspec
from pydantic import BaseModel, Field
from pydantic_core import PydanticSerializationError

from swe_residual.safe_read import valid_json
from swe_residual.structs import reader_struct

FORMAT: Final = "swe-residual-trajectory-1"
MAX_OUTPUT_CHARS = 200_000
MAX_TEXT_CHARS = 1_000_000  # any string of a trajectory written the careful way (Trajectory.write)


class Action(BaseModel):
    command: str
    output: str = ""
    exit_code: int | None = None
    duration_s: float | None = None
    kind: Literal["shell", "view", "edit", "tool"] = "shell"
    path: str | None = Field(default=None, description="file shown or edited, for view/edit actions")
    cwd: str | None = Field(
        default=None,
        description="the shell's working directory when the command started, "
        "where the harness keeps one shell session across steps (None: the repository root)",
    )


class Step(BaseModel):
    index: int
    message: str | None = None
    actions: list[Action] = Field(default_factory=list)
    started_at: float | None = None
    duration_s: float | None = None
    # the model call of this step, where the harness reports it (LiteLLM usage, ATIF metrics)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cost_usd: float | None = None


class Trajectory(BaseModel):
    format: Literal["swe-residual-trajectory-1"] = FORMAT
    agent: str
    harness: str
    steps: list[Step] = Field(default_factory=list)
    exit_status: str | None = None
    submission: str | None = None

    def add_step(
        self,
        message: str | None = None,
        actions: list[Action] | None = None,
        started_at: float | None = None,
        duration_s: float | None = None,
    ) -> Step:
        step = Step(
            index=len(self.steps),
            message=message,
            actions=actions or [],
            started_at=started_at,
            duration_s=duration_s,
        )
        self.steps.append(step)
        return step

    def usage(self) -> tuple[int | None, int | None, float | None]:
        """Prompt tokens, completion tokens and cost summed over the steps that report them (None
        when no step does; the cost also when a step with tokens has none)."""

        def total(values):
            known = [v for v in values if v is not None]
            return sum(known) if known else None

        # a step that reports tokens without a cost makes the run's cost unknown, never a partial sum
        priced = all(
            s.cost_usd is not None
            for s in self.steps
            if s.prompt_tokens is not None or s.completion_tokens is not None
        )
        return (
            total(s.prompt_tokens for s in self.steps),
            total(s.completion_tokens for s in self.steps),
            total(s.cost_usd for s in self.steps) if priced else None,
        )

    def write(self, path: Path) -> None:
        """The trajectory as JSON, secrets redacted. A string that is not valid Unicode (a lone
        surrogate from an agent's output, message or file name) is escaped as text and every
        string is bounded (safe_read.valid_text), so the file always reads back."""
        from swe_residual.redact import redact

        try:
            text = self.model_dump_json(indent=1)
        except PydanticSerializationError:  # a lone surrogate somewhere: the careful way
            data = valid_json(self.model_dump(), limit=MAX_TEXT_CHARS)
            text = json.dumps(data, indent=1, ensure_ascii=False)
        path.write_text(redact(text), encoding="utf-8")

    @classmethod
    def read(cls, path: Path) -> Trajectory:
        return cls.model_validate_json(Path(path).read_text(encoding="utf-8"))


if TYPE_CHECKING:  # a view reads like the model (the struct below is made at run time)
    TrajectoryView = Trajectory
else:
    #: the trajectory as msgspec reads it (ActionView, StepView within): derived from the models above
    TrajectoryView = reader_struct(Trajectory)

_VIEW = msgspec.json.Decoder(TrajectoryView)


def read_view(path: Path | str) -> TrajectoryView | Trajectory:
    """A trajectory file for reading only, as msgspec decodes it: the values Trajectory.read gives,
    in plain structs (reports read one per run: a pydantic model per action costs more than the
    analysis). A file msgspec does not take as it is goes through Trajectory.read."""
    with open(path, "rb") as fh:
        data = fh.read()
    try:
        return _VIEW.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return Trajectory.model_validate_json(data.decode("utf-8"))


def clip(text: str) -> str:
    if len(text) <= MAX_OUTPUT_CHARS:
        return text
    half = MAX_OUTPUT_CHARS // 2
    return text[:half] + f"\n... [{len(text) - MAX_OUTPUT_CHARS} characters elided] ...\n" + text[-half:]


def usage_numbers(counts: dict, cost) -> tuple[int | None, int | None, float | None]:
    """(prompt_tokens, completion_tokens, cost) from what a harness reported; anything that is not a
    non-negative number is unknown."""

    def count(key):
        v = counts.get(key)
        return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None

    cost = (
        float(cost) if isinstance(cost, (int, float)) and not isinstance(cost, bool) and cost >= 0 else None
    )
    return count("prompt_tokens"), count("completion_tokens"), cost


def litellm_usage(extra) -> tuple[int | None, int | None, float | None]:
    """Tokens and cost of one model call from mini-swe-agent's message extra (LiteLLM response
    usage; the cost when LiteLLM knows the model's price - 0 means it does not)."""
    if not isinstance(extra, dict):
        return None, None, None
    response = extra.get("response")
    usage = response.get("usage") if isinstance(response, dict) else None
    cost = extra.get("cost")
    return usage_numbers(usage if isinstance(usage, dict) else {}, cost if cost else None)

"""interactions.jsonl: the ordered terminal interactions of a run, the artifact of a machine state.

A machine-track state is rebuilt by replaying what its predecessor typed into a fresh task
container (docs/machine-track.md), so Stage I records, for every harness, each input in order:

    {"kind": "command", "input": "make install", "timeout": 600, "exit_status": 0,
     "output_sha256": "...", "duration_s": 1.3}
    {"kind": "keys", "input": "python3 emu.py &\\n", "wait": 1.0, "output_sha256": "..."}

`command` is one shell command run to completion (mini-swe-agent, command and replay harnesses);
`keys` are keystrokes sent to a terminal (tmux key names such as `C-c` allowed, as Terminus-2
sends them) followed by a wait of `wait` seconds. The exit status is kept when known (never for
keystrokes); the output only as a digest. Files are read bounded, every line validated.

Converters from other recordings live here too: Terminus-style ATIF trajectories (tool calls
with `keystrokes` and `duration`, what a `replay:` agent types), Terminal-Bench 1's commands.txt
(one Python repr per line) and our own normalized trajectories. Imported predecessor runs go
through sources/atif.py `replayable`, which also knows installed agents' tools and names the first
call no replay can reproduce.
"""

from __future__ import annotations

import ast
import hashlib
import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from swe_residual.errors import InputError
from swe_residual.safe_read import valid_json, valid_text

FILE_NAME = "interactions.jsonl"
MAX_BYTES = 64 << 20  # an interactions file is read up to this size
MAX_LINE = 1 << 20  # one input
MAX_INTERACTIONS = 100_000
DEFAULT_KEYS_WAIT = 1.0  # Terminus-2's default duration when a command gives none
MAX_WAIT = 600.0


class Interaction(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: Literal["command", "keys"] = "command"
    input: str = Field(max_length=MAX_LINE)
    wait: float | None = Field(
        default=None,
        ge=0,
        le=MAX_WAIT,
        description="keys: seconds waited after sending them (None: until the shell is idle)",
    )
    timeout: float | None = Field(default=None, gt=0, description="command: the time limit it ran under")
    exit_status: int | None = None
    output_sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    duration_s: float | None = Field(default=None, ge=0)


def output_digest(text: str) -> str:
    """sha256 of the output's bytes (a byte that was not UTF-8 counts as itself; any other lone
    surrogate as its UTF-8 form, never an error)."""
    try:
        data = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        data = text.encode("utf-8", "surrogatepass")
    return hashlib.sha256(data).hexdigest()


def dumps(items: Iterable[Interaction]) -> bytes:
    """JSON lines; a lone surrogate in an input (an agent's hostile keys) is escaped as text
    (safe_read.valid_text), so the file is always valid UTF-8."""
    rows = [i.model_dump(exclude_none=True) for i in items]
    try:
        return "".join(json.dumps(r, sort_keys=True, ensure_ascii=False) + "\n" for r in rows).encode("utf-8")
    except UnicodeEncodeError:
        return "".join(
            json.dumps(valid_json(r), sort_keys=True, ensure_ascii=False) + "\n" for r in rows
        ).encode("utf-8")


def write_interactions(path: Path, items: Iterable[Interaction]) -> None:
    Path(path).write_bytes(dumps(items))


def parse_interactions(data: bytes, where: str) -> list[Interaction]:
    """Validated interactions from JSON lines; InputError naming `where`, the line and the field."""
    if len(data) > MAX_BYTES:
        raise InputError(f"{where}: {len(data)} bytes, more than {MAX_BYTES >> 20} MiB of interactions")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{where}: not UTF-8 ({exc.reason} at byte {exc.start})") from None
    out: list[Interaction] = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if len(out) >= MAX_INTERACTIONS:
            raise InputError(f"{where}:{n}: more than {MAX_INTERACTIONS} interactions")
        try:
            raw = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"{where}:{n}: not JSON ({exc.msg})") from None
        try:
            out.append(Interaction.model_validate(raw))
        except ValidationError as exc:
            err = exc.errors()[0]
            loc = ".".join(map(str, err["loc"])) or "(line)"
            raise InputError(f"{where}:{n}: {loc}: {err['msg']}") from None
    return out


def read_interactions(path: Path) -> list[Interaction]:
    path = Path(path)
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_BYTES + 1)
    except OSError as exc:
        raise InputError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    return parse_interactions(data, str(path))


def transcript(items: Iterable[Interaction]) -> str:
    """A reviewer's view of the interactions: one `$ command  [exit N]` or `keys: ...  (wait s)` per input."""
    lines = []
    for it in items:
        if it.kind == "command":
            status = "" if it.exit_status is None else f"  [exit {it.exit_status}]"
            lines.append(f"$ {it.input}{status}")
        else:
            wait = "until idle" if it.wait is None else f"{it.wait:g}s"
            lines.append(f"keys: {json.dumps(it.input, ensure_ascii=False)}  (wait {wait})")
    return "\n".join(lines) + ("\n" if lines else "")


# -- converters -------------------------------------------------------------------------------------


def clean_input(text: str) -> str:
    """An input as an interaction holds it: valid text (safe_read.valid_text), at most MAX_LINE long."""
    return valid_text(text[:MAX_LINE])[:MAX_LINE]


def wait_of(value: object) -> float:
    """A recorded wait in seconds, within [0, MAX_WAIT]; Terminus-2's default when it is not a number."""
    try:
        w = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return DEFAULT_KEYS_WAIT
    return min(max(w, 0.0), MAX_WAIT) if math.isfinite(w) else DEFAULT_KEYS_WAIT


def from_atif(data: dict) -> list[Interaction]:
    """The agent's terminal inputs in an ATIF trajectory, in order: `keystrokes` tool calls
    (Terminus-2's bash_command, with their duration) as keys, `command`/`cmd` ones as commands.
    A step's observation is one screen for its whole batch: its digest goes on the last input."""
    out: list[Interaction] = []
    steps = data.get("steps") if isinstance(data, dict) else None
    for step in steps if isinstance(steps, list) else []:
        if not isinstance(step, dict) or step.get("source") != "agent":
            continue
        calls = c if isinstance(c := step.get("tool_calls"), list) else []
        observation = o if isinstance(o := step.get("observation"), dict) else {}
        results = r if isinstance(r := observation.get("results"), list) else []
        mine: list[Interaction] = []
        for call in calls:
            args = call.get("arguments") if isinstance(call, dict) else None
            if isinstance(args, str):
                try:
                    args = json.loads(args)
                except (ValueError, RecursionError):
                    args = None
            if not isinstance(args, dict):
                continue
            if isinstance(args.get("keystrokes"), str):
                mine.append(
                    Interaction(
                        kind="keys",
                        input=clean_input(args["keystrokes"]),
                        wait=wait_of(args.get("duration", DEFAULT_KEYS_WAIT)),
                    )
                )
            else:
                cmd = args.get("command", args.get("cmd"))
                if isinstance(cmd, str) and cmd.strip():
                    mine.append(Interaction(kind="command", input=clean_input(cmd)))
        contents = [t for r in results if isinstance(r, dict) and isinstance(t := r.get("content"), str)]
        if mine and contents:
            mine[-1].output_sha256 = output_digest(contents[-1])
        out.extend(mine)
        if len(out) > MAX_INTERACTIONS:
            raise InputError(f"ATIF trajectory: more than {MAX_INTERACTIONS} terminal inputs")
    return out


def from_tb1_commands(text: str, where: str) -> list[Interaction]:
    """Terminal-Bench 1's commands.txt: each line the Python repr of the keys sent to tmux (a
    string, or a list of strings and key names such as 'Enter'). Only literals are evaluated; no
    wait was recorded, so replay waits until the shell is idle again."""
    out: list[Interaction] = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if len(line) > MAX_LINE:
            raise InputError(f"{where}:{n}: a line longer than {MAX_LINE} characters")
        try:
            keys = ast.literal_eval(line)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            raise InputError(f"{where}:{n}: not a Python string or list of strings") from None
        if isinstance(keys, str):
            keys = [keys]
        if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
            raise InputError(f"{where}:{n}: not a Python string or list of strings")
        for k in keys:
            out.append(
                Interaction(
                    kind="keys", input="\n" if k in ("Enter", "C-m", "KPEnter") else clean_input(k), wait=None
                )
            )
        if len(out) > MAX_INTERACTIONS:
            raise InputError(f"{where}: more than {MAX_INTERACTIONS} terminal inputs")
    return _merge_enter(out)


def _merge_enter(items: list[Interaction]) -> list[Interaction]:
    """['ls', 'Enter'] as one `ls\\n` input (how Terminus records it), so replay waits once."""
    out: list[Interaction] = []
    for it in items:
        if (
            it.input == "\n"
            and out
            and out[-1].kind == "keys"
            and not out[-1].input.endswith("\n")
            and not _is_key_name(out[-1].input)
        ):
            out[-1] = out[-1].model_copy(update={"input": out[-1].input + "\n"})
        else:
            out.append(it)
    return out


def _is_key_name(text: str) -> bool:
    return len(text) <= 12 and (
        text.startswith(("C-", "M-")) or text in ("Escape", "Tab", "BSpace", "Up", "Down")
    )


def from_trajectory_actions(steps) -> list[Interaction]:
    """Commands of a normalized trajectory (swe_residual.trajectory.Step list), as recorded."""
    out: list[Interaction] = []
    for step in steps:
        for a in step.actions:
            if a.kind == "shell" and a.command.strip():
                out.append(
                    Interaction(
                        kind="command",
                        input=clean_input(a.command),
                        exit_status=a.exit_code,
                        output_sha256=output_digest(a.output) if a.output else None,
                        duration_s=a.duration_s,
                    )
                )
    return out

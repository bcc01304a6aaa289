"""ATIF import: the tool calls of common harnesses as view / edit / shell actions.

ATIF (Harbor's Agent Trajectory Interchange Format) records each agent turn as `tool_calls`
(`tool_call_id`, `function_name`, `arguments`) and `observation.results` (`source_call_id`,
`content`). The tool schemas differ per harness; the ones mapped here (docs/formats.md has the
table):

* Anthropic's text editor (`str_replace_based_edit_tool`, `str_replace_editor`) and OpenHands'
  `str_replace_editor` / `file_editor`: `command` view -> view, create / str_replace / insert /
  undo_edit -> edit, on `path`;
* Claude Code: Read / NotebookRead -> view (`file_path`, `notebook_path`); Edit / MultiEdit /
  Write / NotebookEdit -> edit; Grep / Glob / LS -> the equivalent rg / ls command; Bash -> shell;
* shells: `bash`, `Bash`, `execute_bash` / `terminal` (OpenHands; `is_input` sends keys to a
  running program, not a command), `bash_command` (Harbor's conversions), `shell` (Codex, a
  command list), `run_shell_command` (Gemini CLI); Gemini's read_file / write_file / replace;
* Terminus: `keystrokes` (tool-call arguments, or `commands[].keystrokes` in the JSON response
  when the trajectory keeps raw responses) are typed into a tmux shell: lines ending in a newline
  (or followed by an Enter key) run; tmux key names (C-c, Escape, ...) are keys, not text.

Anything else becomes a `tool` action, which opens nothing. Harnesses that keep one shell session
across steps (Anthropic's bash tool, Claude Code's Bash, OpenHands, Terminus) carry the working
directory of one command into the next: each such action records `cwd`, where that shell was.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from typing import Any

from swe_residual.trajectory import MAX_OUTPUT_CHARS, Action, Trajectory, clip, usage_numbers

EDITORS = {"str_replace_based_edit_tool", "str_replace_editor", "file_editor", "text_editor"}
EDITOR_VIEW = {"view"}
EDITOR_EDIT = {"create", "str_replace", "insert", "undo_edit", "write", "append"}
SESSION_SHELLS = {"bash", "Bash", "execute_bash", "terminal"}  # one shell process for the whole run
SHELLS = SESSION_SHELLS | {
    "bash_command",
    "shell",
    "run_shell_command",
    "local_shell",
    "exec_command",
    "execute_command",
    "run_command",
    "run_terminal_cmd",
}
VIEWS = {"Read": "file_path", "NotebookRead": "notebook_path", "read_file": None}
EDITS = {
    "Edit": "file_path",
    "MultiEdit": "file_path",
    "Write": "file_path",
    "NotebookEdit": "notebook_path",
    "write_file": None,
    "replace": None,
    "edit_file": None,
}
PATH_KEYS = ("file_path", "absolute_path", "path", "notebook_path", "filename")
_TMUX_KEY = re.compile(
    r"^(?:[CMS]-\S+|Enter|KPEnter|Escape|Esc|Tab|BTab|BSpace|Space|Up|Down|Left|Right|Home|"
    r"End|PageUp|PageDown|PPage|NPage|PgUp|PgDn|IC|DC|F\d{1,2})$"
)
_RUN_KEYS = {"Enter", "KPEnter", "C-m", "C-j"}
_CLEAR_KEYS = {"C-c", "C-d", "C-u", "C-z", "C-\\"}
MAX_MESSAGE_JSON = 1_000_000


@dataclass
class _Call:
    kind: str  # shell | view | edit | tool | keys
    command: str
    path: str | None = None
    session: bool = False  # a shell whose working directory carries over to the next call
    cwd: str | None = None  # a directory the call itself names (Codex workdir)


def kind_of(value: Any) -> str:
    """What a JSON value is, for a one-line message: `an object`, `a list`, `the number 5`, ..."""
    if isinstance(value, bool) or value is None:
        return "null" if value is None else str(value).lower()
    if isinstance(value, (int, float)):
        return f"the number {value!r}"[:60]
    return {dict: "an object", list: "a list", str: "a string"}.get(type(value), type(value).__name__)


def _id(value: Any) -> str | int | None:
    """A tool call id as a key: a non-empty string or a number; anything else is no id."""
    return value if isinstance(value, (str, int)) and not isinstance(value, bool) and value else None


def _text(value: Any, depth: int = 0) -> str:
    """An observation's content: a string, or text parts [{"type": "text", "text": ...}] (parts
    nested deeper than 20 levels are left out)."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        if depth >= 20:
            return ""
        return "\n".join(_text(v.get("text") if isinstance(v, dict) else v, depth + 1) for v in value)
    try:
        return "" if value is None else str(value)
    except RecursionError:  # an object nested too deep to show
        return ""


def _path(args: dict, key: str | None) -> str | None:
    value = args.get(key) if key else next((args[k] for k in PATH_KEYS if isinstance(args.get(k), str)), None)
    return value if isinstance(value, str) and value else None


def _grep_command(args: dict) -> str:
    """Claude Code's Grep as the ripgrep command it runs (output_mode files_with_matches by default)."""
    words = ["rg"]
    mode = args.get("output_mode")
    mode = mode if isinstance(mode, str) and mode else "files_with_matches"
    words += {"files_with_matches": ["-l"], "count": ["-c"]}.get(mode, [])
    for flag in ("-n", "-i"):
        if args.get(flag) is True:
            words.append(flag)
    for flag in ("-A", "-B", "-C"):
        if isinstance(args.get(flag), int):
            words += [flag, str(args[flag])]
    if args.get("multiline"):
        words.append("-U")
    if isinstance(args.get("glob"), str):
        words += ["--glob", args["glob"]]
    if isinstance(args.get("type"), str):
        words += ["--type", args["type"]]
    words += ["-e", str(args.get("pattern", "")), "--", str(args.get("path") or ".")]
    return shlex.join(words)


def _shell_text(value: Any) -> str | None:
    """A shell tool's command: a string, or an argv list (["bash", "-lc", SCRIPT] is SCRIPT)."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        if (
            len(value) == 3
            and value[0].rsplit("/", 1)[-1] in ("bash", "sh", "zsh")
            and value[1] in ("-c", "-lc")
        ):
            return value[2]
        return shlex.join(value)
    return None


def map_call(name: str, args: Any) -> _Call:
    """One ATIF tool call as an action description."""
    args = args if isinstance(args, dict) else {}
    try:
        described = f"{name} {json.dumps(args, sort_keys=True)[:500]}"
    except (ValueError, TypeError, RecursionError):  # arguments nested too deep to show
        described = f"{name} (arguments not shown)"
    if "keystrokes" in args and isinstance(args["keystrokes"], str):
        return _Call("keys", args["keystrokes"], session=True)
    if name in EDITORS:
        sub, path = args.get("command"), _path(args, "path")
        if sub in EDITOR_VIEW and path:
            return _Call("view", f"{name} view {path}", path)
        if sub in EDITOR_EDIT and path:
            return _Call("edit", f"{name} {sub} {path}", path)
        return _Call("tool", described)
    if name in VIEWS:
        path = _path(args, VIEWS[name])
        return _Call("view", f"{name} {path}", path) if path else _Call("tool", described)
    if name in EDITS:
        path = _path(args, EDITS[name])
        return _Call("edit", f"{name} {path}", path) if path else _Call("tool", described)
    if name == "Grep":
        return _Call("shell", _grep_command(args))
    if name == "Glob":
        return _Call(
            "shell",
            shlex.join(
                ["rg", "--files", "--glob", str(args.get("pattern", "")), "--", str(args.get("path") or ".")]
            ),
        )
    if name == "LS":
        return _Call("shell", shlex.join(["ls", str(args.get("path") or ".")]))
    command = _shell_text(args.get("command", args.get("cmd")))
    if command is not None and (name in SHELLS or name not in EDITORS):
        if args.get("is_input") in (True, "true"):  # keys for a running program (OpenHands)
            return _Call("tool", described)
        cwd = next(
            (args[k] for k in ("workdir", "cwd", "directory", "dir_path") if isinstance(args.get(k), str)),
            None,
        )
        return _Call("shell", command, session=name in SESSION_SHELLS, cwd=cwd)
    return _Call("tool", described)


class _Keys:
    """What a Terminus tmux session ran: typed text runs line by line, keys edit the pending line."""

    def __init__(self) -> None:
        self.pending = ""

    def feed(self, keystrokes: str) -> list[str]:
        key = keystrokes.strip()
        if _TMUX_KEY.match(key) and "\n" not in keystrokes:
            if key in _RUN_KEYS:
                line, self.pending = self.pending, ""
                return [line] if line.strip() else []
            if key in _CLEAR_KEYS:
                self.pending = ""
            return []
        *lines, self.pending = (self.pending + keystrokes).split("\n")
        return [ln for ln in lines if ln.strip()]


def _message_keystrokes(message: Any) -> list[str]:
    """`commands[].keystrokes` of a Terminus response kept raw in the step message (JSON, maybe
    wrapped in prose or a code fence)."""
    if not isinstance(message, str) or "keystrokes" not in message or len(message) > MAX_MESSAGE_JSON:
        return []
    start, end = message.find("{"), message.rfind("}")
    try:
        data = json.loads(message[start : end + 1]) if 0 <= start < end else None
    except (ValueError, RecursionError):
        return []
    commands = data.get("commands") if isinstance(data, dict) else None
    if not isinstance(commands, list):
        return []
    return [c["keystrokes"] for c in commands if isinstance(c, dict) and isinstance(c.get("keystrokes"), str)]


def from_atif(data: dict, agent: str = "atif") -> Trajectory:
    """Import an ATIF trajectory: each agent step's tool calls as actions with their results.
    ValueError when `steps` is not a list; parts of a step of the wrong type are left out."""
    from swe_residual.shell.exposure import session_cwd

    steps = data.get("steps")
    if steps is not None and not isinstance(steps, list):
        raise ValueError(f"steps: {kind_of(steps)} where a list belongs")
    info = data.get("agent") if isinstance(data.get("agent"), dict) else {}
    harness = info.get("name") if isinstance(info.get("name"), str) and info.get("name") else "atif"
    traj = Trajectory(agent=agent, harness=harness)
    keys = _Keys()
    cwd = ""  # the session shell's working directory ("" = where the harness started it)
    for step in steps or []:
        if not isinstance(step, dict) or step.get("source") != "agent":
            continue
        observation = step.get("observation") if isinstance(step.get("observation"), dict) else {}
        results = observation.get("results") if isinstance(observation.get("results"), list) else []
        results = [r for r in results if isinstance(r, dict)]
        calls = step.get("tool_calls") if isinstance(step.get("tool_calls"), list) else []
        calls = [c for c in calls if isinstance(c, dict)]
        by_id = {
            _id(r.get("source_call_id")): _text(r.get("content"))
            for r in results
            if _id(r.get("source_call_id")) is not None
        }
        loose = [_text(r.get("content")) for r in results if _id(r.get("source_call_id")) is None]
        mapped = [map_call(str(c.get("function_name") or ""), c.get("arguments")) for c in calls]
        outputs: list[str | None] = [
            by_id.get(_id(c.get("tool_call_id"))) if _id(c.get("tool_call_id")) is not None else None
            for c in calls
        ]
        if not calls:  # raw responses: Terminus keystrokes in the message
            mapped = [_Call("keys", k, session=True) for k in _message_keystrokes(step.get("message"))]
            outputs = [None] * len(mapped)
        unassigned = [k for k, o in enumerate(outputs) if o is None]
        shared = None
        if len(loose) == len(unassigned):
            for k, text in zip(unassigned, loose):
                outputs[k] = text
        elif loose:
            shared = "\n".join(loose)  # one screen after several calls (Terminus): the calls share it
        actions: list[Action] = []
        typed: list[str] = []
        for call, out in zip(mapped, outputs):
            if call.kind == "keys":
                typed += keys.feed(call.command)
                if out is not None and typed:
                    actions.append(_shell("\n".join(typed), out, cwd))
                    cwd, typed = session_cwd("\n".join(typed), cwd), []
                continue
            if call.kind == "shell":
                start = call.cwd if call.cwd is not None else cwd if call.session else None
                actions.append(_shell(call.command, out if out is not None else shared or "", start or ""))
                if call.session:
                    cwd = session_cwd(call.command, cwd)
                continue
            actions.append(
                Action(
                    command=clip(call.command),
                    kind=call.kind,
                    path=call.path,
                    output=clip(out if out is not None else ""),
                )
            )
        if typed:
            actions.append(_shell("\n".join(typed), shared or "", cwd))
            cwd = session_cwd("\n".join(typed), cwd)
        message = step.get("message")
        added = traj.add_step(message=message if isinstance(message, str) else None, actions=actions)
        added.prompt_tokens, added.completion_tokens, added.cost_usd = step_usage(step.get("metrics"))
    return traj


def step_usage(metrics) -> tuple[int | None, int | None, float | None]:
    """ATIF step `metrics` (prompt_tokens, completion_tokens, cost_usd); anything malformed is unknown."""
    if not isinstance(metrics, dict):
        return None, None, None
    return usage_numbers(metrics, metrics.get("cost_usd"))


def _shell(command: str, output: str, cwd: str) -> Action:
    return Action(command=command[:MAX_OUTPUT_CHARS], output=clip(output), kind="shell", cwd=cwd or None)


# -- what of a trajectory can be replayed into a machine (the machine track's Stage I) -------------

#: tool calls that change nothing on the machine: replay skips them
NO_EFFECT = {
    "mark_task_complete",
    "task_complete",
    "Grep",
    "Glob",
    "LS",
    "TodoWrite",
    "TodoRead",
    "WebFetch",
    "WebSearch",
    "ExitPlanMode",
    "think",
    "list_directory",
    "glob",
    "search_file_content",
    "google_web_search",
    "web_fetch",
    "read_many_files",
    "update_plan",
    "finish",
}
#: tool calls that write a whole file from their arguments: (path key, content key)
WHOLE_FILE_WRITES = {"Write": ("file_path", "content"), "write_file": (None, "content")}


@dataclass
class Replayable:
    """The ordered inputs a machine state is rebuilt from, and the first tool call no replay can
    reproduce (None when every call is replayed or changes nothing)."""

    inputs: list[Any]  # swe_residual.interactions.Interaction
    unreplayable: str | None = None


def _write_command(path: str, content: str) -> str:
    """A shell command that writes `content` to `path` byte for byte (base64: no quoting issue)."""
    import base64

    data = base64.b64encode(content.encode("utf-8", "surrogateescape")).decode()
    q = shlex.quote(path)
    return f'mkdir -p -- "$(dirname -- {q})" && printf %s {data} | base64 -d > {q}'


def replayable(data: dict) -> Replayable:
    """The machine inputs of an ATIF trajectory, in order: Terminus-2 `keystrokes` (with their
    `duration`) as keys; installed agents' shell calls as commands, run from the directory their
    session shell was in; whole-file writes as the command that writes the file. Reads, searches
    and plans change nothing and are skipped. Anything else (a file edit by the agent's own tool,
    keys sent to a running program, an unknown tool) cannot be replayed: `unreplayable` names its
    step, and the inputs stop before it (a state is never rebuilt from part of a run)."""
    from swe_residual.interactions import (
        DEFAULT_KEYS_WAIT,
        MAX_INTERACTIONS,
        MAX_LINE,
        Interaction,
        clean_input,
        output_digest,
        wait_of,
    )
    from swe_residual.shell.exposure import session_cwd

    out: list[Interaction] = []
    steps = data.get("steps") if isinstance(data, dict) else None
    cwd = ""
    for n, step in enumerate(steps if isinstance(steps, list) else [], 1):
        if not isinstance(step, dict) or step.get("source") != "agent":
            continue
        sid = step.get("step_id") if isinstance(step.get("step_id"), int) else n
        calls = (
            [c for c in step.get("tool_calls") or [] if isinstance(c, dict)]
            if isinstance(step.get("tool_calls"), list)
            else []
        )
        observation = step.get("observation") if isinstance(step.get("observation"), dict) else {}
        results = observation.get("results") if isinstance(observation.get("results"), list) else []
        contents = [t for r in results if isinstance(r, dict) and isinstance(t := r.get("content"), str)]
        mine: list[Interaction] = []
        for call in calls:
            name = str(call.get("function_name") or "")[:80]
            args = call.get("arguments")
            if isinstance(args, str):
                try:
                    args = json.loads(args)
                except (ValueError, RecursionError):
                    args = None
            args = args if isinstance(args, dict) else {}
            too_long = next(
                (len(v) for v in args.values() if isinstance(v, str) and len(v) > MAX_LINE // 2), None
            )
            if too_long is not None:
                out.extend(mine)
                return Replayable(
                    out,
                    f"trajectory step {sid}: tool call {name or '(unnamed)'!r} has an argument of "
                    f"{too_long} characters, more than one interaction holds; cannot be replayed",
                )
            if isinstance(args.get("keystrokes"), str):
                mine.append(
                    Interaction(
                        kind="keys",
                        input=clean_input(args["keystrokes"]),
                        wait=wait_of(args.get("duration", DEFAULT_KEYS_WAIT)),
                    )
                )
                continue
            if name in NO_EFFECT:
                continue
            call_ = map_call(name, args)
            if call_.kind == "view":
                continue
            if call_.kind == "shell" and name in SHELLS and call_.command.strip():
                start = call_.cwd if call_.cwd is not None else cwd if call_.session else ""
                command = call_.command if not start else f"cd {shlex.quote(start)} && {call_.command}"
                mine.append(Interaction(kind="command", input=clean_input(command)))
                if call_.session:
                    cwd = session_cwd(call_.command, cwd)
                continue
            write = _whole_write(name, args)
            if write is not None:
                mine.append(Interaction(kind="command", input=clean_input(_write_command(*write))))
                continue
            what = {
                "edit": "a file edit by the agent's own tool",
                "shell": "a shell call without a command",
            }.get(call_.kind, "a tool no shell can replay")
            if call_.kind == "tool" and args.get("is_input") in (True, "true"):
                what = "keys sent to a running program"
            out.extend(mine)
            return Replayable(
                out, f"trajectory step {sid}: tool call {name or '(unnamed)'!r} ({what}) cannot be replayed"
            )
        if mine and contents:
            mine[-1].output_sha256 = output_digest(contents[-1])
        out.extend(mine)
        if len(out) > MAX_INTERACTIONS:
            return Replayable(out[:MAX_INTERACTIONS], f"more than {MAX_INTERACTIONS} terminal inputs")
    return Replayable(out)


def _whole_write(name: str, args: dict) -> tuple[str, str] | None:
    """(path, content) of a call that writes a whole file, else None."""
    if name in WHOLE_FILE_WRITES:
        key, body = WHOLE_FILE_WRITES[name]
        path = _path(args, key)
        content = args.get(body)
        return (path, content) if path and isinstance(content, str) else None
    if name in EDITORS and args.get("command") == "create":
        path, content = _path(args, "path"), args.get("file_text")
        return (path, content) if path and isinstance(content, str) else None
    return None

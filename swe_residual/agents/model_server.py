"""A scripted OpenAI-compatible chat-completions server on 127.0.0.1 (standard library only).

Real-model agents (mini-swe-agent + LiteLLM) are tested offline against it. The reply to a
request is chosen by how many turns the conversation already has, so one server can serve many
runs at once. A turn is an assistant message, or a feedback message the agent sent without one
(mini-swe-agent drops a reply it cannot parse and sends only its format-error feedback). A script
is YAML:

    replies:
      - {message: "Look at the inherited work first.", command: "git status"}
      - {error: 503}                # an HTTP error with an OpenAI-style error body (model-service failure)
      - {error: context_window}     # HTTP 400 "maximum context length" / code context_length_exceeded
                                    #   (LiteLLM raises litellm.ContextWindowExceededError)
      - {error: disconnect}         # close the connection without answering
      - {message: "Let me th", finish_reason: length}   # output cut off at max_tokens before any
                                    #   tool call (no tool call); with a command, the call's JSON
                                    #   arguments are cut in half
      - {message: "Thinking..."}    # a plain answer without a tool call (finish_reason stop)
      - {delay: 5, command: "ls"}   # any reply may wait `delay` seconds first (client timeouts)
      - {command: "ls", usage: {prompt_tokens: 1000, completion_tokens: 50}}
                                    # any reply may state its token usage (else 1 token per 4
                                    #   characters): spend that crosses a cost limit at a known step
      - {json: {analysis: ..., plan: ..., commands: [{keystrokes: "ls\n", duration: 0.1}],
                task_complete: false}}  # a plain answer whose text is this value as JSON (Terminus)
    after_last: repeat              # repeat | submit  (what to answer past the end)
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import yaml

SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
CONTEXT_WINDOW_TOKENS = 128000

# The body OpenAI (and vLLM, OpenRouter and most compatible providers) send with HTTP 400 when the
# prompt does not fit: LiteLLM recognizes both the message and the code.
CONTEXT_WINDOW_ERROR = {
    "message": f"This model's maximum context length is {CONTEXT_WINDOW_TOKENS} tokens. However, your "
    f"messages resulted in {CONTEXT_WINDOW_TOKENS + 1905} tokens. Please reduce the length of "
    "the messages.",
    "type": "invalid_request_error",
    "param": "messages",
    "code": "context_length_exceeded",
}

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    403: "invalid_request_error",
    404: "invalid_request_error",
    429: "rate_limit_exceeded",
}
_NAMED_ERRORS = ("context_window", "disconnect")


def load_script(path: Path) -> dict:
    data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    replies = data.get("replies")
    if not isinstance(replies, list) or not replies:
        raise ValueError(f"{path}: replies: a non-empty list is required")
    for i, item in enumerate(replies):
        where = f"{path}: replies[{i}]"
        if not isinstance(item, dict):
            raise ValueError(f"{where}: a mapping is required")
        if "error" in item:
            err = item["error"]
            if not (err in _NAMED_ERRORS or (isinstance(err, int) and 400 <= err <= 599)):
                raise ValueError(
                    f"{where}: error: {err!r} (an HTTP status 400-599, or one of {', '.join(_NAMED_ERRORS)})"
                )
        elif "command" not in item and "message" not in item and "json" not in item:
            raise ValueError(f"{where}: command, message, json or error is required")
        if "usage" in item:
            counts = item["usage"]
            if not (
                isinstance(counts, dict)
                and set(counts) <= {"prompt_tokens", "completion_tokens"}
                and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in counts.values())
            ):
                raise ValueError(
                    f"{where}: usage: {counts!r} (a mapping of prompt_tokens and completion_tokens to "
                    "counts >= 0)"
                )
        if item.get("finish_reason", "stop") not in ("stop", "length", "tool_calls"):
            raise ValueError(
                f"{where}: finish_reason: {item['finish_reason']!r} (stop, length or tool_calls)"
            )
    if data.get("after_last", "repeat") not in ("repeat", "submit"):
        raise ValueError(f"{path}: after_last: {data['after_last']!r} (repeat or submit)")
    return data


def conversation_turn(messages: list[dict]) -> int:
    """How many turns the conversation already has: assistant messages, plus user messages after the
    task that do not answer an assistant message (feedback for a reply the agent dropped)."""
    turn, users, previous = 0, 0, None
    for m in messages:
        role = m.get("role")
        if role == "assistant":
            turn += 1
        elif role == "user":
            users += 1
            if users > 1 and previous != "assistant":
                turn += 1
        previous = role
    return turn


def usage(messages: list, reply: dict, scripted: dict | None = None) -> dict:
    """Token counts as a provider reports them: the reply's scripted `usage` where it has one, else
    one token per 4 characters (deterministic)."""

    def chars(obj) -> int:
        return len(json.dumps(obj, ensure_ascii=False, sort_keys=True))

    prompt = max(1, sum(chars(m.get("content")) for m in messages if isinstance(m, dict)) // 4)
    completion = max(1, (chars(reply.get("content")) + chars(reply.get("tool_calls"))) // 4)
    prompt = (scripted or {}).get("prompt_tokens", prompt)
    completion = (scripted or {}).get("completion_tokens", completion)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


class ScriptedModelServer:
    def __init__(self, script: dict):
        self.script = script
        self.requests: list[dict] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # quiet
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                server.requests.append(body)
                item = server.item(body)
                if item.get("delay"):
                    time.sleep(float(item["delay"]))
                if item.get("error") == "disconnect":
                    self.close_connection = True
                    return
                status, payload = server.reply(body, item)
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout)
                    self.close_connection = True

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def item(self, body: dict) -> dict:
        turn = conversation_turn(body.get("messages", []))
        replies = self.script["replies"]
        if turn < len(replies):
            return replies[turn]
        if self.script.get("after_last", "repeat") == "submit":
            return {"message": "Done.", "command": SUBMIT}
        return replies[-1]

    def reply(self, body: dict, item: dict | None = None) -> tuple[int, dict]:
        turn = conversation_turn(body.get("messages", []))
        item = self.item(body) if item is None else item
        if "error" in item:
            if item["error"] == "context_window":
                return 400, {"error": dict(CONTEXT_WINDOW_ERROR)}
            code = int(item["error"])
            return code, {
                "error": {
                    "message": f"scripted error {code}",
                    "type": _ERROR_TYPES.get(code, "server_error"),
                    "param": None,
                    "code": code,
                }
            }
        content = json.dumps(item["json"], indent=1) if "json" in item else item.get("message", "")
        message: dict = {"role": "assistant", "content": content}
        finish_reason = item.get("finish_reason")
        if "command" in item:
            arguments = json.dumps({"command": item["command"]})
            if finish_reason == "length":  # cut off inside the tool call: its arguments are not valid JSON
                arguments = arguments[: max(1, len(arguments) // 2)]
            message["tool_calls"] = [
                {
                    "id": f"call_{turn}",
                    "type": "function",
                    "function": {"name": "bash", "arguments": arguments},
                }
            ]
            finish_reason = finish_reason or "tool_calls"
        return 200, {
            "id": f"chatcmpl-{turn}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "scripted"),
            "choices": [{"index": 0, "finish_reason": finish_reason or "stop", "message": message}],
            "usage": usage(body.get("messages") or [], message, item.get("usage")),
        }

    def __enter__(self) -> ScriptedModelServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

"""A small bash parser: enough structure to tell which files a command line showed the agent.

It never runs anything and never raises: an agent's command is hostile, often malformed input,
and a best-effort reading is all the measures need. It knows quoting ('...', "...", $'...',
backslashes), comments, heredocs (their bodies are kept, a Python heredoc is code to read),
command and process substitution ($(...), `...`, <(...)), pipelines and lists, subshells and
brace groups (so a `cd` inside parentheses does not leak), `for NAME in WORDS` loops, and
redirections. Variables are left as written ($f stays "$f"), except a for-loop's own variable.

parse(text) -> Script; the exposure module walks it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

MAX_DEPTH = 8  # nesting of substitutions / groups / bash -c followed
MAX_CHARS = 100_000  # longer command lines are cut (heredoc bodies included)


@dataclass(slots=True)
class Word:
    text: str  # quotes removed; substitutions kept as written
    subs: list[Script] = field(default_factory=list)  # $(...) and `...` inside the word
    procsub: Script | None = None  # the word is <(...) or >(...)
    whole_sub: bool = False  # the word is exactly one $(...) (maybe quoted)


@dataclass(slots=True)
class Redirect:
    op: str  # ">", ">>", "<", "<<", "<<<", ">&", "&>", ...
    fd: str  # the fd written before the operator ("" when none)
    target: str  # file, fd number, or heredoc delimiter
    body: str | None = None  # heredoc / here-string text


@dataclass(slots=True)
class Simple:
    words: list[Word] = field(default_factory=list)
    redirects: list[Redirect] = field(default_factory=list)


@dataclass(slots=True)
class Group:
    body: Script
    subshell: bool  # ( ... ) rather than { ...; }
    redirects: list[Redirect] = field(default_factory=list)
    loop_var: str | None = None  # for NAME in WORDS; do body; done
    loop_words: list[Word] = field(default_factory=list)


Command = Simple | Group
Pipeline = list[Command]


@dataclass(slots=True)
class Script:
    pipelines: list[Pipeline] = field(default_factory=list)


# -- lexing -------------------------------------------------------------------------------------

_PLAIN = re.compile(r"[^\s'\"\\$`;&|()<>]+")
_REDIR = re.compile(r"(\d*)(&>>|&>|>>|>&|>\||<<<|<<-|<<|<&|<>|>|<)")
_OPS = ("&&", "||", ";;", "|&", ";", "&", "|", "(", ")", "\n")
_HEREDOC_DELIM = re.compile(r"\s*(['\"]?)([^\s'\";&|()<>]+)\1")
_KEYWORDS_PREFIX = {"if", "then", "elif", "else", "while", "until", "do", "!", "time"}
_KEYWORDS_END = {"fi", "done", "esac", "}"}
_ANSI_C = {"n": "\n", "t": "\t", "\\": "\\", "'": "'", '"': '"', "r": "\r", "a": "\a", "e": "\x1b"}


def _close_quote(text: str, i: int, quote: str) -> int:
    """Index of the closing `quote` for text[i] == quote (len(text) when unterminated)."""
    if quote == "'":
        j = text.find("'", i + 1)
        return len(text) if j < 0 else j
    j = i + 1
    while j < len(text):
        ch = text[j]
        if ch == "\\":
            j += 2
            continue
        if ch == quote:
            return j
        if quote == '"' and ch == "$" and text.startswith("$(", j):
            j = _close_paren(text, j + 1) + 1
            continue
        if quote == '"' and ch == "`":
            j = _close_quote(text, j, "`") + 1
            continue
        j += 1
    return len(text)


def _close_paren(text: str, i: int) -> int:
    """Index of the ')' matching text[i] == '(' (quotes and nesting respected)."""
    depth = 0
    j = i
    while j < len(text):
        ch = text[j]
        if ch == "\\":
            j += 2
            continue
        if ch in "'\"`":
            j = _close_quote(text, j, ch) + 1
            continue
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                return j
        j += 1
    return len(text)


class _Lexer:
    """Tokens: ("w", Word), ("op", str), ("r", Redirect). Heredoc bodies are read at the newline
    that ends their line and attached to their Redirect."""

    def __init__(self, text: str, depth: int):
        self.text = text
        self.depth = depth
        self.tokens: list[tuple[str, object]] = []
        self.pending: list[Redirect] = []

    def run(self) -> list[tuple[str, object]]:
        text, i, n = self.text, 0, len(self.text)
        while i < n:
            ch = text[i]
            if ch == "\n":
                self.tokens.append(("op", "\n"))
                i = self._heredocs(i + 1)
                continue
            if ch in " \t\r":
                i += 1
                continue
            if ch == "\\" and text.startswith("\\\n", i):  # line continuation
                i += 2
                continue
            if ch == "#":
                j = text.find("\n", i)
                i = n if j < 0 else j
                continue
            m = _REDIR.match(text, i)
            if m and not (m.group(2) in ("<", ">") and text.startswith("(", m.end()) and not m.group(1)):
                i = self._redirect(m)
                continue
            if ch in "<>" and text.startswith("(", i + 1):  # process substitution <(...) / >(...)
                j = _close_paren(text, i + 1)
                inner = parse(text[i + 2 : j], self.depth + 1)
                self.tokens.append(("w", Word(text[i : j + 1], procsub=inner)))
                i = j + 1
                continue
            op = next((o for o in _OPS if text.startswith(o, i)), None)
            if op is not None:
                self.tokens.append(("op", op))
                i += len(op)
                continue
            word, i = self._word(i)
            self.tokens.append(("w", word))
        return self.tokens

    def _redirect(self, m: re.Match) -> int:
        fd, op = m.group(1), m.group(2)
        i = m.end()
        if op in ("<<", "<<-"):
            d = _HEREDOC_DELIM.match(self.text, i)
            delim = d.group(2) if d else ""
            r = Redirect(op, fd, delim, "")
            self.pending.append(r)
            self.tokens.append(("r", r))
            return d.end() if d else i
        while i < len(self.text) and self.text[i] in " \t":
            i += 1
        if i >= len(self.text) or self.text[i] in "\n;&|()<>":
            self.tokens.append(("r", Redirect(op, fd, "")))
            return i
        word, i = self._word(i)
        r = Redirect(op, fd, word.text, word.text if op == "<<<" else None)
        self.tokens.append(("r", r))
        return i

    def _heredocs(self, i: int) -> int:
        """Read the bodies of the heredocs opened on the line that just ended."""
        text = self.text
        while self.pending:
            r = self.pending.pop(0)
            lines = []
            while i < len(text):
                j = text.find("\n", i)
                end = len(text) if j < 0 else j
                line = text[i:end]
                i = end + 1
                check = line.lstrip("\t") if r.op == "<<-" else line
                if check == r.target:
                    break
                lines.append(line)
            r.body = "\n".join(lines)
        return i

    def _word(self, i: int) -> tuple[Word, int]:
        text, n = self.text, len(self.text)
        parts: list[str] = []
        subs: list[Script] = []
        start = i
        while i < n:
            ch = text[i]
            if ch in " \t\r\n;&|()<>":
                break
            if ch == "'":
                j = _close_quote(text, i, "'")
                parts.append(text[i + 1 : j])
                i = j + 1
            elif ch == '"':
                j = _close_quote(text, i, '"')
                parts.append(self._dquoted(text[i + 1 : j], subs))
                i = j + 1
            elif ch == "\\":
                if i + 1 < n and text[i + 1] != "\n":
                    parts.append(text[i + 1])
                i += 2
            elif ch == "$":
                i = self._dollar(i, parts, subs)
            elif ch == "`":
                j = _close_quote(text, i, "`")
                subs.append(parse(text[i + 1 : j], self.depth + 1))
                parts.append(text[i : j + 1])
                i = j + 1
            else:
                m = _PLAIN.match(text, i)
                parts.append(m.group())
                i = m.end()
        raw = text[start:i]
        whole = (
            len(subs) == 1 and raw.strip('"').startswith(("$(", "`")) and raw.strip('"').endswith((")", "`"))
        )
        return Word("".join(parts), subs, whole_sub=whole), i

    def _dollar(self, i: int, parts: list[str], subs: list[Script]) -> int:
        text = self.text
        if text.startswith("$((", i):  # arithmetic: literal
            j = _close_paren(text, i + 1)
            parts.append(text[i : j + 1])
            return j + 1
        if text.startswith("$(", i):
            j = _close_paren(text, i + 1)
            subs.append(parse(text[i + 2 : j], self.depth + 1))
            parts.append(text[i : j + 1])
            return j + 1
        if text.startswith("${", i):
            j = text.find("}", i)
            j = len(text) - 1 if j < 0 else j
            parts.append(text[i : j + 1])
            return j + 1
        if text.startswith("$'", i):
            j = _close_quote(text, i + 1, "'")
            body = text[i + 2 : j]
            parts.append(re.sub(r"\\(.)", lambda m: _ANSI_C.get(m.group(1), m.group(1)), body))
            return j + 1
        parts.append("$")
        return i + 1

    def _dquoted(self, body: str, subs: list[Script]) -> str:
        """Text of a double-quoted string: escapes of $ ` " \\ resolved, substitutions parsed."""
        out: list[str] = []
        i = 0
        while i < len(body):
            ch = body[i]
            if ch == "\\" and i + 1 < len(body) and body[i + 1] in '$`"\\\n':
                out.append("" if body[i + 1] == "\n" else body[i + 1])
                i += 2
            elif ch == "$" and body.startswith("$(", i) and not body.startswith("$((", i):
                j = _close_paren(body, i + 1)
                subs.append(parse(body[i + 2 : j], self.depth + 1))
                out.append(body[i : j + 1])
                i = j + 1
            elif ch == "`":
                j = _close_quote(body, i, "`")
                subs.append(parse(body[i + 1 : j], self.depth + 1))
                out.append(body[i : j + 1])
                i = j + 1
            else:
                out.append(ch)
                i += 1
        return "".join(out)


# -- parsing ------------------------------------------------------------------------------------


class _Parser:
    def __init__(self, tokens: list[tuple[str, object]]):
        self.toks = tokens
        self.i = 0

    def peek(self) -> tuple[str, object] | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def script(self, closer: str | None = None) -> Script:
        """Pipelines until `closer` (")", "}" or "done") or the end."""
        s = Script()
        while (tok := self.peek()) is not None:
            kind, val = tok
            if kind == "op" and val in (";", "&", "&&", "||", "\n", ";;"):
                self.i += 1
                continue
            if closer and self._is_closer(tok, closer):
                self.i += 1
                return s
            if kind == "op" and val == ")":  # unbalanced: skip
                self.i += 1
                continue
            pipe = self.pipeline(closer)
            if pipe:
                s.pipelines.append(pipe)
        return s

    @staticmethod
    def _is_closer(tok: tuple[str, object], closer: str) -> bool:
        kind, val = tok
        if closer == ")":
            return kind == "op" and val == ")"
        return kind == "w" and val.text == closer and not val.subs  # type: ignore[union-attr]

    def pipeline(self, closer: str | None) -> Pipeline:
        pipe: Pipeline = []
        while (tok := self.peek()) is not None:
            cmd = self.command(closer)
            if cmd is not None:
                pipe.append(cmd)
            tok = self.peek()
            if tok is not None and tok[0] == "op" and tok[1] in ("|", "|&"):
                self.i += 1
                continue
            break
        return pipe

    def command(self, closer: str | None) -> Command | None:
        tok = self.peek()
        if tok is None:
            return None
        kind, val = tok
        if kind == "op" and val == "(":
            self.i += 1
            return self._redirected(Group(self.script(")"), True))
        if kind == "w":
            word = val.text  # type: ignore[union-attr]
            if word == "{":
                self.i += 1
                return self._redirected(Group(self.script("}"), False))
            if word == "for":
                return self._for()
        simple = Simple()
        first = True
        while (tok := self.peek()) is not None:
            kind, val = tok
            if kind == "op":
                break
            if closer and self._is_closer(tok, closer) and first:
                break
            self.i += 1
            if kind == "r":
                simple.redirects.append(val)  # type: ignore[arg-type]
                continue
            if first and val.text in _KEYWORDS_PREFIX and not val.subs:  # type: ignore[union-attr]
                continue
            if first and val.text in _KEYWORDS_END and not val.subs:  # type: ignore[union-attr]
                continue
            first = False
            simple.words.append(val)  # type: ignore[arg-type]
        return simple if simple.words or simple.redirects else None

    def _redirected(self, group: Group) -> Group:
        while (tok := self.peek()) is not None and tok[0] == "r":
            group.redirects.append(tok[1])  # type: ignore[arg-type]
            self.i += 1
        return group

    def _for(self) -> Command | None:
        """for NAME [in WORDS]; do BODY; done (C-style loops are read as plain commands)."""
        self.i += 1
        tok = self.peek()
        if tok is None or tok[0] != "w":
            return None
        name = tok[1].text  # type: ignore[union-attr]
        self.i += 1
        words: list[Word] = []
        tok = self.peek()
        if tok is not None and tok[0] == "w" and tok[1].text == "in":  # type: ignore[union-attr]
            self.i += 1
            while (tok := self.peek()) is not None and tok[0] == "w":
                words.append(tok[1])  # type: ignore[arg-type]
                self.i += 1
        while (tok := self.peek()) is not None and tok[0] == "op" and tok[1] in (";", "\n"):
            self.i += 1
        tok = self.peek()
        if tok is not None and tok[0] == "w" and tok[1].text == "do":  # type: ignore[union-attr]
            self.i += 1
        body = self.script("done")
        group = self._redirected(Group(body, False, loop_var=name, loop_words=words))
        return group


def parse(text: str, depth: int = 0) -> Script:
    """The command line as a Script; deeper than MAX_DEPTH, an empty Script."""
    if depth > MAX_DEPTH or not text:
        return Script()
    tokens = _Lexer(text[:MAX_CHARS], depth).run()
    return _Parser(tokens).script()

"""What an action showed the agent: which files it opened, and whether it ran git status / diff.

A file is *opened* when an action showed the agent its contents (docs/metrics.md, "Opening a
file", has the rules with examples). Each shell command line is parsed once (analyze() is cached
per distinct command and starting directory) into Facts: the git subcommands it ran and the
*reads* whose output reached the agent. A read names files by path arguments, file sets (find,
ls, xargs, $(...)) or search scopes; whether it really showed them is decided against the
recorded output (content that is not only an error message, grep-style `path:line` prefixes,
diff hunks), so `cat missing.py` or an empty `grep` open nothing.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import TYPE_CHECKING

from swe_residual.patches import git_header_path, strip_prefix
from swe_residual.shell.syntax import Group, Redirect, Script, Simple, Word, parse

if TYPE_CHECKING:
    from swe_residual.trajectory import Action, Trajectory

# -- output: what the agent saw -------------------------------------------------------------------

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][A-Z0-9]|\r")
#: a shell prompt echoed on a terminal screen ("root@host:/app# cat x"), and terminal harness headers
_PROMPT = re.compile(
    r"^(?:\([^)\n]*\)\s*)?[\w.-]+@[\w.-]+:[^\n]*?[#$%](?:\s|$)|"
    r"^(?:New Terminal Output|Current Terminal Screen|Current terminal state):?\s*$"
)
#: a tool's error line ("cat: x: No such file or directory", "fatal: ... does not exist")
_ERROR = re.compile(
    r"^\s*[\w./\[\]-]+:.*(?:no such file|is a directory|permission denied|cannot open|"
    r"cannot access|does not exist|not found|unrecognized option|invalid option|"
    r"invalid object|bad revision|unknown revision|ambiguous argument|is outside repository)|"
    r"^usage:|^Traceback \(most recent call last\)|^\s+File \"[^\"]*\", line \d+|"
    r"^Vim: Warning: |^Vim: Error",
    re.IGNORECASE,
)
#: an editor tool's error ("Error: the path x does not exist", "<tool_use_error>File does not exist.")
_VIEW_ERROR = re.compile(
    r"no such file|does not exist|not found|is a directory|permission denied|"
    r"tool_use_error|^\s*error\b|^\s*ERROR:?\s*$",
    re.IGNORECASE,
)
_GREP_PREFIX = re.compile(r"^([^\s:]+):|^([^\s:]+)-\d+-")
_GIT_GREP_REV = re.compile(r"^[^\s:]+:([^\s:]+):")
_HEADING_NEXT = re.compile(r"^\d+[:-]")


class Output:
    """One action's recorded output, cleaned once (colours, echoed prompts) and read lazily."""

    def __init__(self, raw: str):
        self.raw = raw or ""

    @cached_property
    def lines(self) -> list[str]:
        text = _ANSI.sub("", self.raw) if "\x1b" in self.raw or "\r" in self.raw else self.raw
        return [ln for ln in text.split("\n") if not _PROMPT.match(ln)]

    @cached_property
    def text(self) -> str:
        return "\n".join(self.lines)

    @cached_property
    def content(self) -> bool:
        """A line that is neither blank nor an error message."""
        return any(ln.strip() and not _ERROR.search(ln) for ln in self.lines)

    def has_content(self, arg: str | None = None) -> bool:
        """Content, and no error message about `arg` (the file asked for)."""
        if not self.content:
            return False
        if arg and arg in self.raw:
            return not any(arg in ln and _ERROR.search(ln) for ln in self.lines)
        return True

    @cached_property
    def view_content(self) -> bool:
        """An editor view showed something other than an error."""
        return any(ln.strip() and not _VIEW_ERROR.search(ln) for ln in self.lines)

    @cached_property
    def prefixes(self) -> list[str]:
        """Paths in front of search result lines (`path:12:text`, `path-12-context`, `REV:path:`)
        and rg heading lines (a path alone, then numbered lines)."""
        out: set[str] = set()
        lines = self.lines
        for i, ln in enumerate(lines):
            m = _GREP_PREFIX.match(ln)
            if m:
                out.add(m.group(1) or m.group(2))
                g = _GIT_GREP_REV.match(ln)
                if g:
                    out.add(g.group(1))
            elif ln and " " not in ln and i + 1 < len(lines) and _HEADING_NEXT.match(lines[i + 1]):
                out.add(ln)
        return sorted(out)

    @cached_property
    def diff_paths(self) -> tuple[set[str], set[str]]:
        """(git paths, other paths) whose hunks (not only a header or a stat line) appear in diff
        output: `diff --git a/x b/x` headers are repository paths; `--- x` / `+++ x` headers of
        other diffs are paths as the command named them."""
        git_shown: set[str] = set()
        other_shown: set[str] = set()
        names: list[str] = []
        is_git = False
        for line in self.lines:
            if line.startswith("diff --git "):
                names, is_git = [git_header_path(line[len("diff --git ") :])], True
            elif line.startswith("diff ") and not line.startswith("diff --git"):
                parts = line.split()
                names, is_git = [p for p in parts[-2:] if not p.startswith("-")], False
            elif line.startswith(("--- ", "+++ ")) and (names or line.startswith("--- ")):
                path = line[4:].split("\t", 1)[0].strip()
                if path != "/dev/null":
                    names.append(strip_prefix(path) if is_git else path)
            elif line.startswith("@@") and names:
                (git_shown if is_git else other_shown).update(names)
        return git_shown, other_shown


# -- paths ----------------------------------------------------------------------------------------

_SYSTEM_DIRS = {
    "tmp",
    "usr",
    "etc",
    "var",
    "proc",
    "sys",
    "opt",
    "lib",
    "lib64",
    "bin",
    "sbin",
    "dev",
    "run",
    "boot",
    "srv",
    "mnt",
    "media",
    "snap",
    "nix",
}


def _join(cwd: str, path: str) -> str:
    return (
        os.path.normpath(os.path.join(cwd, path))
        if cwd and not path.startswith("/")
        else os.path.normpath(path)
    )


@lru_cache(maxsize=1 << 14)
def _parts(cwd: str, arg: str) -> tuple[str, ...]:
    return tuple(p for p in _join(cwd, arg).split("/") if p not in ("", "."))


def path_matches(arg: str, cwd: str, target: str) -> bool:
    """Does a path argument (maybe relative to a `cd`, maybe absolute, maybe a glob) name target?

    The repository root is unknown here, so an argument names `target` when its last path
    components equal target's components (glob components matched with fnmatch).
    """
    last = arg.rstrip("/").rsplit("/", 1)[-1]
    if last != target.rsplit("/", 1)[-1] and last not in (".", "..", "") and not _GLOB.search(last):
        return False  # the last components differ: the usual answer, without normalizing
    parts = _parts(cwd, arg)
    want = target.split("/")
    if len(parts) < len(want):
        return False
    tail = parts[len(parts) - len(want) :]
    return all(w == p or fnmatch.fnmatchcase(w, p) for w, p in zip(want, tail))


def _under(root: str, cwd: str, target: str) -> tuple[str, int] | None:
    """(target's path below `root`, its depth there) when target lies under the directory root:
    root's last components equal target's first ones, or root is the repository itself (".",
    or a top-level absolute directory such as /app that is not a system directory)."""
    rparts = _parts(cwd, root)
    fparts = target.split("/")
    for k in range(min(len(rparts), len(fparts) - 1), 0, -1):
        if rparts[len(rparts) - k :] == tuple(fparts[:k]):
            return "/".join(fparts[k:]), len(fparts) - k
    absolute = _join(cwd, root).startswith("/")
    if (
        not rparts
        and not absolute
        and not cwd.startswith("/")
        or (absolute and len(rparts) == 1 and rparts[0] not in _SYSTEM_DIRS)
    ):
        return target, len(fparts)
    return None


@dataclass(frozen=True, slots=True)
class FileSet:
    """Files a command selected by name: literal paths, or a tree (find, ls, rg --files...)
    with optional basename / whole-path globs."""

    cwd: str = ""
    literal: tuple[str, ...] = ()
    roots: tuple[str, ...] = ()
    names: tuple[str, ...] = ()  # basename globs
    paths: tuple[str, ...] = ()  # whole-path globs (find -path)
    any_test: bool = False  # tests joined by -o: one suffices
    maxdepth: int | None = None

    def contains(self, target: str) -> bool:
        if any(path_matches(w, self.cwd, target) for w in self.literal):
            return True
        base = target.rsplit("/", 1)[-1]
        for root in self.roots:
            below = _under(root, self.cwd, target)
            if below is None or (self.maxdepth is not None and below[1] > self.maxdepth):
                continue
            printed = root.rstrip("/") + "/" + below[0]
            tests = [fnmatch.fnmatchcase(base, n) or fnmatch.fnmatchcase(base.lower(), n) for n in self.names]
            tests += [fnmatch.fnmatchcase(printed, p) for p in self.paths]
            if not tests or (any(tests) if self.any_test else all(tests)):
                return True
        return False


# -- reads: what a command may have shown ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ContentRead:
    """A program printed the contents of `arg` (cat, head, sed -n, python open(), git show REV:path...)."""

    arg: str
    cwd: str

    def shown(self, out: Output, candidates: Iterable[str]) -> set[str]:
        hits = {f for f in candidates if path_matches(self.arg, self.cwd, f)}
        return hits if hits and out.has_content(self.arg) else set()


@dataclass(frozen=True, slots=True)
class SetRead:
    """A program printed the contents of every file of a set (xargs cat, find -exec cat, cat $(find))."""

    files: FileSet

    def shown(self, out: Output, candidates: Iterable[str]) -> set[str]:
        hits = {f for f in candidates if self.files.contains(f)}
        return hits if hits and out.has_content() else set()


@dataclass(frozen=True, slots=True)
class SearchRead:
    """grep-style search: files whose `path:line` results appear, or the one file searched."""

    cwd: str
    single: str | None = None  # the only file searched: its matches print without a name

    def shown(self, out: Output, candidates: Iterable[str]) -> set[str]:
        found = set()
        for f in candidates:
            base = f.rsplit("/", 1)[-1]
            if (
                base in out.raw
                and any(path_matches(p, self.cwd, f) for p in out.prefixes)
                or self.single is not None
                and path_matches(self.single, self.cwd, f)
                and out.has_content(self.single)
            ):
                found.add(f)
        return found


@dataclass(frozen=True, slots=True)
class HunksRead:
    """Diff output (git diff/show/log -p, diff -u): files with a hunk in it."""

    cwd: str

    def shown(self, out: Output, candidates: Iterable[str]) -> set[str]:
        if "@@" not in out.raw:
            return set()
        git_paths, other = out.diff_paths
        return {
            f
            for f in candidates
            if any(path_matches(p, "", f) for p in git_paths)
            or any(path_matches(p, self.cwd, f) for p in other)
        }


@dataclass(frozen=True, slots=True)
class Facts:
    """What one command line did, independent of its output: the git subcommands it ran, the
    reads whose output reached the agent, and the working directory it left the shell in."""

    git: frozenset[str]
    reads: tuple[ContentRead | SetRead | SearchRead | HunksRead, ...]
    cwd: str
    named: bool = True  # a file these reads show has its name in the command or in the output


# -- programs -------------------------------------------------------------------------------------

_WRAPPERS = {
    "sudo": {"-u", "-g", "-h", "-p", "-C", "-D", "-r", "-t", "-U"},
    "env": {"-u", "-C", "-S"},
    "nice": {"-n"},
    "stdbuf": {"-i", "-o", "-e"},
    "ionice": {"-c", "-n", "-p"},
    "timeout": {"-s", "-k", "--signal", "--kill-after"},
    "time": {"-f", "-o"},
    "nohup": set(),
    "command": set(),
    "builtin": set(),
    "exec": {"-a"},
    "unbuffer": set(),
    "chronic": set(),
    "catchsegv": set(),
}

#: programs that print the contents of their file operands, with the options that take a value
_READERS: dict[str, set[str]] = {
    "cat": set(),
    "tac": {"-s", "--separator"},
    "rev": set(),
    "comm": set(),
    "more": {"-n"},
    "most": set(),
    "nl": {"-b", "-d", "-f", "-h", "-i", "-l", "-n", "-s", "-v", "-w"},
    "head": {"-n", "-c", "--lines", "--bytes"},
    "tail": {"-n", "-c", "--lines", "--bytes", "-s", "--pid", "--sleep-interval", "--max-unchanged-stats"},
    "less": {
        "-b",
        "-h",
        "-j",
        "-k",
        "-o",
        "-O",
        "-p",
        "-P",
        "-t",
        "-T",
        "-x",
        "-y",
        "-z",
        "--pattern",
        "--tabs",
    },
    "bat": {
        "-l",
        "-r",
        "-H",
        "-m",
        "--language",
        "--line-range",
        "--highlight-line",
        "--style",
        "--theme",
        "--map-syntax",
        "--tabs",
        "--wrap",
        "--terminal-width",
        "--color",
        "--paging",
        "--file-name",
    },
    "xxd": {"-c", "-g", "-l", "-s", "-o", "-n", "-cols", "-len", "-seek", "-groupsize", "-offset", "-name"},
    "hexdump": {"-n", "-s", "-e", "-f"},
    "od": {"-A", "-j", "-N", "-t", "-S", "-w"},
    "strings": {"-n", "-t", "-e", "-T", "-s", "--bytes", "--radix", "--encoding", "--target"},
    "fold": {"-w", "--width"},
    "fmt": {"-w", "-p", "-g", "--width", "--prefix", "--goal"},
    "expand": {"-t", "--tabs"},
    "unexpand": {"-t", "--tabs"},
    "pr": {"-w", "-l", "-h", "-o", "-N", "-W"},
    "sort": {
        "-k",
        "-t",
        "-o",
        "-S",
        "-T",
        "--key",
        "--field-separator",
        "--output",
        "--buffer-size",
        "--temporary-directory",
        "--parallel",
        "--batch-size",
        "--files0-from",
    },
    "uniq": {"-f", "-s", "-w", "--skip-fields", "--skip-chars", "--check-chars"},
    "cut": {
        "-b",
        "-c",
        "-d",
        "-f",
        "--bytes",
        "--characters",
        "--delimiter",
        "--fields",
        "--output-delimiter",
    },
    "paste": {"-d", "--delimiters"},
    "column": {"-s", "-c", "-o", "-N", "-l", "-R", "-E", "-W", "-H"},
    "sed": {"-e", "-f", "-l", "--expression", "--file", "--line-length"},
    "awk": {
        "-f",
        "-v",
        "-F",
        "-i",
        "-l",
        "-E",
        "--file",
        "--assign",
        "--field-separator",
        "--include",
        "--load",
    },
    "jq": {"-f", "--from-file", "--indent", "-L"},
    "perl": {"-e", "-E", "-I", "-M", "-m", "-x", "-l", "-0"},
    "vim": {"-c", "--cmd", "-S", "-u", "-U", "-i", "-T", "-w", "-W", "-t", "-q", "--servername"},
    "nano": {
        "-T",
        "-r",
        "-Y",
        "-o",
        "-Q",
        "-X",
        "-f",
        "--tabsize",
        "--fill",
        "--syntax",
        "--operatingdir",
        "--quotestr",
    },
    "emacs": {
        "-l",
        "--load",
        "-f",
        "--funcall",
        "--eval",
        "-L",
        "--directory",
        "--chdir",
        "-t",
        "--terminal",
    },
    "micro": {"-config-dir", "-options"},
    "view": set(),
}
_ALIASES = {
    "batcat": "bat",
    "gawk": "awk",
    "mawk": "awk",
    "nawk": "awk",
    "hd": "hexdump",
    "vi": "vim",
    "nvim": "vim",
    "ex": "vim",
    "vimdiff": "vim",
    "view": "vim",
    "rvim": "vim",
    "pico": "nano",
    "egrep": "grep",
    "fgrep": "grep",
    "zcat": "cat",
    "zless": "less",
    "pg": "more",
    "ack-grep": "ack",
}
_JQ_TWO = {"--arg", "--argjson", "--slurpfile", "--rawfile"}
_SEARCHERS = {"grep", "rg", "ag", "ack"}
#: later pipeline stages that pass (part of) the content lines on to the agent
_FILTERS = set(_READERS) - {"vim", "nano", "emacs", "micro", "view"} | _SEARCHERS | {"tr", "tee", "cat"}
_SHELLS = {"bash", "sh", "zsh", "dash", "ksh", "ash", "busybox"}
_PYTHON = re.compile(r"^(?:python|pypy)(?:\d+(?:\.\d+)?)?$")
_GREP_ARG_LETTERS = set("efABCmdD")
_RG_ARG_LETTERS = set("efABCmgtTMjrEd")
_GREP_ARG_LONG = {
    "--regexp",
    "--file",
    "--after-context",
    "--before-context",
    "--context",
    "--max-count",
    "--include",
    "--exclude",
    "--exclude-dir",
    "--label",
    "--devices",
    "--directories",
    "--binary-files",
    "--glob",
    "--iglob",
    "--type",
    "--type-not",
    "--replace",
    "--max-columns",
    "--max-depth",
    "--encoding",
    "--threads",
    "--type-add",
    "--sort",
    "--sortr",
    "--max-filesize",
    "--path-separator",
    "--ignore-file",
    "--pre",
    "--pre-glob",
    "--engine",
    "--color",
    "--colors",
    "--context-separator",
    "--field-match-separator",
}
_LIST_LONG = {
    "--files",
    "--files-with-matches",
    "--files-without-match",
    "--count",
    "--count-matches",
    "--quiet",
    "--silent",
    "--type-list",
    "--name-only",
}
_GIT_GLOBAL_ARG = {"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--exec-path", "--config-env"}
_GIT_HUNKS = {
    "diff",
    "log",
    "show",
    "whatchanged",
    "format-patch",
    "stash",
    "add",
    "reflog",
    "range-diff",
    "checkout",
    "restore",
    "reset",
    "difftool",
    "cherry-pick",
    "apply",
}
_BLAME_ARG = {"-L", "-S", "--contents", "--since", "--ignore-rev", "--ignore-revs-file", "--date", "--abbrev"}
_PY_OPEN = re.compile(
    r"""\b(?:io\.|codecs\.)?open\(\s*(?:[rbuf]{0,2}(['"])(.+?)\1|([A-Za-z_][\w.\[\]]*))\s*"""
    r"""(?:,\s*(?:mode\s*=\s*)?(['"])([^'"]*)\4)?"""
)
_PY_PATH = re.compile(
    r"""\bPath\(\s*(?:[rbuf]{0,2}(['"])(.+?)\1|([A-Za-z_][\w.\[\]]*))\s*\)\s*\.\s*"""
    r"""(?:read_text|read_bytes|open)\("""
)
_PY_ASSIGN = re.compile(r"""\b([A-Za-z_]\w*)\s*=\s*[rbuf]{0,2}(['"])([^'"\n]+)\2""")
_PY_FOR = re.compile(r"""\bfor\s+([A-Za-z_]\w*)\s+in\s+[\[(]([^\])]*)[\])]""")
_PY_STR = re.compile(r"""(['"])([^'"\n]+)\1""")
_JS_READ = re.compile(r"""readFileSync\(\s*(['"`])(.+?)\1""")
_ASSIGNMENT = re.compile(r"^[A-Za-z_]\w*=")
_GLOB = re.compile(r"[*?\[]")
CACHED_CHARS = 4096  # longer command lines (big heredocs) are parsed each time, never kept in the cache


class _Walk:
    """One pass over a parsed command line, collecting Facts."""

    def __init__(self) -> None:
        self.git: set[str] = set()
        self.reads: list = []

    # -- structure --

    def script(self, script: Script, cwd: str, reaches: bool, env: dict[str, list[str]]) -> str:
        """Walk a list of pipelines; returns the working directory it ends in."""
        state = [cwd, cwd]  # current, previous (for `cd -`)
        for pipe in script.pipelines:
            for idx, cmd in enumerate(pipe):
                later = pipe[idx + 1 :]
                reach = reaches and not _stdout_away(cmd.redirects) and all(map(_passes, later))
                upstream = pipe[idx - 1] if idx else None
                if isinstance(cmd, Group):
                    self.group(cmd, state, reach, env)
                elif len(pipe) == 1 and _is_cd(cmd):
                    _cd(cmd, state)
                else:
                    self.simple(cmd, state[0], reach, upstream, env)
        return state[0]

    def group(self, g: Group, state: list[str], reaches: bool, env: dict[str, list[str]]) -> None:
        if g.loop_var is not None:
            for w in g.loop_words:  # for f in $(git diff --name-only): ran git diff
                for s in w.subs:
                    self.sub(s, state[0], False, env)
            values = [v for w in g.loop_words for v in _expand(w, env)]
            env = {**env, g.loop_var: values}
        end = self.script(g.body, state[0], reaches, env)
        if not g.subshell:
            state[1], state[0] = state[0], end

    def sub(self, script: Script | None, cwd: str, reaches: bool, env: dict[str, list[str]]) -> None:
        if script is not None:
            self.script(script, cwd, reaches, env)

    # -- one simple command --

    def simple(self, cmd: Simple, cwd: str, reaches: bool, upstream, env: dict[str, list[str]]) -> None:
        words = cmd.words
        prog, i = _program(words)
        args = [v for w in words[i + 1 :] for v in _expand(w, env)]
        arg_words = words[i + 1 :]
        shows_args = prog in ("echo", "printf") and reaches
        for w in words:
            for s in w.subs:  # $(...) output becomes part of the command line
                self.sub(s, cwd, shows_args, env)
            if w.procsub is not None:  # <(...) feeds a program that may print it
                self.sub(
                    w.procsub,
                    cwd,
                    reaches and (_base(prog) in _READERS or prog in ("diff", "cmp", "comm")),
                    env,
                )
        if not prog:
            return
        stdin_text = next((r.body for r in reversed(cmd.redirects) if r.body is not None), None)
        stdin_file = next(
            (r.target for r in reversed(cmd.redirects) if r.op == "<" and r.fd in ("", "0")), None
        )
        base = _base(prog)
        if prog == "git":
            self.git_cmd(args, cwd, reaches)
        elif prog in _SHELLS:
            self.shell(args, stdin_text, cwd, reaches, env)
        elif prog == "eval":
            self.sub(parse(" ".join(args)), cwd, reaches, env)
        elif prog == "xargs":
            self.xargs(args, upstream, cwd, reaches, env)
        elif prog == "find":
            self.find(args, cwd, reaches)
        elif not reaches:
            return
        elif _PYTHON.match(prog):
            self.python(args, stdin_text, cwd)
        elif prog in ("node", "nodejs", "deno", "bun"):
            for j, a in enumerate(args[:-1]):
                if a in ("-e", "-p", "--eval", "--print"):
                    self.reads += [ContentRead(m.group(2), cwd) for m in _JS_READ.finditer(args[j + 1])]
        elif base in _SEARCHERS:
            self.search(base, args, cwd, stdin_file)
        elif prog == "diff" or prog == "colordiff":
            self.diff(args, cwd)
        elif base in _READERS:
            files = _reader_files(prog, args, arg_words)
            if files is None:
                return
            for text, word in files:
                fs = _substituted_set(word, cwd, env) if word is not None and word.whole_sub else None
                if fs is not None:
                    self.reads.append(SetRead(fs))
                elif text != "-":
                    self.reads.append(ContentRead(text, cwd))
            if not files and stdin_file:
                self.reads.append(ContentRead(stdin_file, cwd))

    def shell(self, args: list[str], stdin_text: str | None, cwd: str, reaches: bool, env) -> None:
        """bash -c 'STRING' / bash <<EOF ... EOF: the inner command line, in a child shell."""
        for j, a in enumerate(args):
            if a.startswith("-") and "c" in a.lstrip("-") and not a.startswith("--") and j + 1 < len(args):
                self.sub(parse(args[j + 1]), cwd, reaches, env)
                return
            if not a.startswith("-"):
                return  # bash script.sh: a file run, not shown
        if stdin_text:
            self.sub(parse(stdin_text), cwd, reaches, env)

    def git_cmd(self, args: list[str], cwd: str, reaches: bool) -> None:
        i = 0
        while i < len(args) and args[i].startswith("-"):
            if args[i] == "-C" and i + 1 < len(args):
                cwd = _join(cwd, args[i + 1])
            i += 2 if args[i] in _GIT_GLOBAL_ARG else 1
        if i >= len(args):
            return
        sub, rest = args[i], args[i + 1 :]
        self.git.add(sub)
        if not reaches:
            return
        if sub in _GIT_HUNKS:
            self.reads.append(HunksRead(cwd))
        if sub in ("show", "cat-file"):
            for a in rest:
                if not a.startswith("-") and ":" in a:
                    path = a.split(":", 1)[1]
                    if path:  # REV:path is relative to the repository root, REV:./path to the cwd
                        self.reads.append(ContentRead(path, cwd if path.startswith(("./", "../")) else ""))
        elif sub in ("blame", "annotate"):
            ops = _operands(rest, _BLAME_ARG)
            if ops:
                self.reads.append(ContentRead(ops[-1], cwd))
        elif sub == "grep":
            self.search("git-grep", rest, cwd, None)

    def search(self, prog: str, args: list[str], cwd: str, stdin_file: str | None) -> None:
        spec = _search_spec(prog, args)
        if spec is None:
            return
        paths, recursive, with_name = spec
        if not paths and not recursive:  # searching stdin: what it shows came from an earlier stage
            if stdin_file:
                self.reads.append(SearchRead(cwd, single=stdin_file))
            return
        single = (
            paths[0]
            if len(paths) == 1
            and with_name is not True
            and prog != "git-grep"
            and not (recursive and prog == "grep")
            and not _GLOB.search(paths[0])
            else None
        )
        self.reads.append(SearchRead(cwd, single=single))

    def diff(self, args: list[str], cwd: str) -> None:
        ops, brief, recursive = [], False, False
        for a in args:
            if a.startswith("--"):
                brief |= a in ("--brief", "--quiet")
                recursive |= a == "--recursive"
            elif a.startswith("-") and len(a) > 1:
                brief |= "q" in a
                recursive |= "r" in a
            else:
                ops.append(a)
        if brief:
            return
        self.reads.append(HunksRead(cwd))
        if len(ops) == 2 and not recursive:
            self.reads += [ContentRead(o, cwd) for o in ops if not o.startswith(("<(", "-"))]

    def python(self, args: list[str], stdin_text: str | None, cwd: str) -> None:
        code, argv = None, []
        for j, a in enumerate(args):
            if a == "-c" and j + 1 < len(args):
                code, argv = args[j + 1], args[j + 2 :]
                break
            if a == "-m" and j + 1 < len(args):
                if args[j + 1] in ("json.tool", "tokenize", "pydoc"):
                    self.reads += [ContentRead(o, cwd) for o in args[j + 2 :] if not o.startswith("-")]
                return
            if a == "-":
                break
            if a in ("-W", "-X", "-Q") or not a.startswith("-") and j and args[j - 1] in ("-W", "-X", "-Q"):
                continue
            if not a.startswith("-"):
                return  # python script.py: runs a file
        if code is None:
            code = stdin_text
        if code:
            self.reads += [ContentRead(p, cwd) for p in _python_reads(code, argv)]

    def xargs(self, args: list[str], upstream, cwd: str, reaches: bool, env) -> None:
        """xargs CMD: CMD runs on the names the previous stage printed."""
        i, repl = 0, None
        opts = {
            "-I",
            "-n",
            "-L",
            "-P",
            "-s",
            "-d",
            "-E",
            "-a",
            "--max-args",
            "--max-lines",
            "--max-procs",
            "--delimiter",
            "--arg-file",
            "--eof",
            "--max-chars",
        }
        while i < len(args) and args[i].startswith("-"):
            a = args[i]
            if a in ("-a", "--arg-file"):
                return  # names from a file we never saw
            if a == "-I" and i + 1 < len(args):
                repl = args[i + 1]
            elif a.startswith(("-i", "--replace")):
                repl = a.split("=", 1)[1] if "=" in a else (a[2:] or "{}")
            i += 2 if a in opts else 1
        if i >= len(args):
            return
        names = _stage_set(upstream, cwd, env) if isinstance(upstream, Simple) else None
        self.tool_on_set(args[i], args[i + 1 :], names, repl, cwd, reaches)

    def find(self, args: list[str], cwd: str, reaches: bool) -> None:
        found, execs = _find_spec(args, cwd)
        for cmd_words in execs:
            if cmd_words:
                self.tool_on_set(cmd_words[0], cmd_words[1:], found, "{}", cwd, reaches)

    def tool_on_set(
        self, prog: str, args: list[str], names: FileSet | None, repl: str | None, cwd: str, reaches: bool
    ) -> None:
        """A program run on a set of file names (xargs CMD, find -exec CMD {})."""
        prog, i = _program([Word(prog)] + [Word(a) for a in args])
        rest = args[i:]
        base = _base(prog)
        if prog == "git":
            self.git_cmd([a for a in rest if a != repl], cwd, reaches)
        if not reaches:
            return
        if base in _SEARCHERS:
            self.reads.append(SearchRead(cwd))
        elif base in _READERS:
            literal = [a for a in (_reader_files(prog, rest, None) or []) if repl is None or repl not in a[0]]
            self.reads += [ContentRead(t, cwd) for t, _ in literal]
            if names is not None:
                self.reads.append(SetRead(names))


def _base(prog: str) -> str:
    return _ALIASES.get(prog, prog)


def _program(words: list[Word]) -> tuple[str, int]:
    """Program name and its index, past variable assignments and wrappers (sudo, env, timeout...)."""
    i = 0
    while i < len(words):
        w = words[i].text
        name = os.path.basename(w)
        if _ASSIGNMENT.match(w):
            i += 1
        elif name in _WRAPPERS:
            i += 1
            while i < len(words) and (
                words[i].text.startswith("-") or (name == "env" and _ASSIGNMENT.match(words[i].text))
            ):
                i += 1 + (words[i].text in _WRAPPERS[name])
            if name == "timeout":
                i += 1  # the duration
        else:
            return name, i
    return "", i


def _expand(word: Word, env: dict[str, list[str]]) -> list[str]:
    """The word's values, with a for-loop variable replaced by each of its values."""
    text = word.text
    if "$" not in text or not env:
        return [text]
    for name, values in env.items():
        for ref in (f"${{{name}}}", f"${name}"):
            if ref in text and (
                ref.endswith("}") or not re.match(r"\w", text[text.find(ref) + len(ref) :][:1])
            ):
                return [v for value in values for v in _expand(Word(text.replace(ref, value)), env)]
    return [text]


def _is_cd(cmd: Simple) -> bool:
    return bool(cmd.words) and cmd.words[0].text in ("cd", "pushd", "popd")


def _cd(cmd: Simple, state: list[str]) -> None:
    words = [w.text for w in cmd.words[1:] if not w.text.startswith("-") or w.text == "-"]
    if cmd.words[0].text == "popd":
        state[0], state[1] = state[1], state[0]
        return
    target = words[0] if words else "~"
    new = state[1] if target == "-" else _join(state[0], target) if target != "~" else "~"
    state[1], state[0] = state[0], new


def _stdout_away(redirects: list[Redirect]) -> bool:
    """Standard output goes to a file (not to the terminal, not to stderr, which is recorded too)."""
    for r in redirects:
        if (
            r.op in (">", ">>", ">|")
            and r.fd in ("", "1")
            and r.target not in ("/dev/stdout", "/dev/stderr", "/dev/tty")
        ):
            return True
        if r.op in ("&>", "&>>") or (
            r.op == ">&" and r.fd in ("", "1") and not (r.target.isdigit() or r.target == "-")
        ):
            return r.target not in ("/dev/stdout", "/dev/stderr", "/dev/tty")
    return False


def _passes(cmd) -> bool:
    """A later pipeline stage that passes content lines on to the agent."""
    if not isinstance(cmd, Simple) or _stdout_away(cmd.redirects):
        return False
    prog, i = _program(cmd.words)
    base = _base(prog)
    if base not in _FILTERS:
        return False
    args = [w.text for w in cmd.words[i + 1 :]]
    if base in _SEARCHERS:
        return _search_spec(base, args) is not None
    return not (base == "sed" and any(_sed_in_place(a) for a in args))


def _sed_in_place(arg: str) -> bool:
    if arg == "--in-place" or arg.startswith("--in-place="):
        return True
    if arg.startswith("-") and not arg.startswith("--"):
        return "i" in re.split("[ef]", arg[1:], maxsplit=1)[0]  # letters after -e/-f are its argument
    return False


def _operands(args: list[str], arg_opts: set[str]) -> list[str]:
    """Non-option arguments (options in arg_opts take the next word; `--` ends options)."""
    out, i = [], 0
    while i < len(args):
        a = args[i]
        if a == "--":
            return out + args[i + 1 :]
        if a.startswith("-") and len(a) > 1:
            i += 2 if a in arg_opts else 1
            continue
        out.append(a)
        i += 1
    return out


def _reader_files(
    prog: str, args: list[str], words: list[Word] | None
) -> list[tuple[str, Word | None]] | None:
    """File operands of a content reader, each with its Word (for $(...) file lists); None when it
    shows no file content (sed -i edits, sort -o / uniq IN OUT / xxd IN OUT write elsewhere)."""
    base = _base(prog)
    arg_opts = _READERS.get(base, set())
    aligned = words is not None and len(words) == len(args)
    files: list[tuple[str, Word | None]] = []
    script_given = False
    flags = ""
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            files += [(x, words[k] if aligned else None) for k, x in enumerate(args) if k > i]
            break
        if base == "sed" and _sed_in_place(a):
            return None
        if base in ("sort",) and (a in ("-o", "--output") or a.startswith("--output=")):
            return None
        if (
            base == "perl"
            and a.startswith("-")
            and "i" in a.lstrip("-").split("e")[0]
            and not a.startswith("--")
        ):
            return None
        if base == "jq" and a in _JQ_TWO:
            i += 3
            continue
        if base == "jq" and a in ("--args", "--jsonargs"):
            break
        if base == "vim" and a.startswith("+"):
            i += 1
            continue
        if base == "vim" and a == "-s" and "e" not in flags and prog != "ex":
            i += 2
            continue
        if a in arg_opts:
            script_given |= a in ("-e", "-E", "-f", "--expression", "--file", "--from-file")
            i += 2
            continue
        if a.startswith("--"):
            script_given |= a.startswith(("--expression=", "--file=", "--from-file="))
        elif a.startswith("-") and len(a) > 1:
            cluster = a[1:]
            flags += cluster
            if base == "sed" and ("e" in cluster or "f" in cluster):
                script_given = True
                if cluster[-1] in "ef":  # -ne SCRIPT: the script is the next word
                    i += 1
            elif base == "awk" and cluster[0] == "f":
                script_given = True
            elif base == "perl" and ("e" in cluster or "E" in cluster):
                script_given = True
                if cluster[-1] in "eE":
                    i += 1
        else:
            files.append((a, words[i] if aligned else None))
        i += 1
    if base in ("sed", "awk", "jq") and not script_given and files:
        files = files[1:]  # the first operand is the script / filter
    if base == "perl" and not ("n" in flags or "p" in flags):
        return []  # perl -e CODE FILE: FILE is an argument, not input
    if base in ("uniq", "xxd") and len(files) >= 2:
        return None  # the second operand is the output file
    if base == "xxd" and "r" in flags:
        return None
    if base == "vim" and "t" in flags:
        return []
    return files


def _search_spec(prog: str, args: list[str]) -> tuple[list[str], bool, bool | None] | None:
    """(paths searched, recursive, --with-filename given) of grep / rg / git grep; None for the
    listing modes (-l, -L, -c, -q, --files...), which show names or counts, not content."""
    git = prog == "git-grep"
    letters = _RG_ARG_LETTERS if prog == "rg" else _GREP_ARG_LETTERS
    listing_letters = set("lcq") if prog == "rg" else set("lLcqg") if prog in ("ag", "ack") else set("lLcq")
    recursive = prog in ("rg", "ag", "ack") or git
    with_name: bool | None = None
    positional: list[str] = []
    pattern_given = False
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            positional.extend(args[i + 1 :])
            break
        if a.startswith("--"):
            name = a.split("=", 1)[0]
            if name in _LIST_LONG:
                return None
            recursive |= name in ("--recursive", "--dereference-recursive")
            if name == "--with-filename":
                with_name = True
            elif name == "--no-filename":
                with_name = False
            pattern_given |= name in ("--regexp", "--file")
            i += 2 if name in _GREP_ARG_LONG and "=" not in a else 1
            continue
        if a.startswith("-") and len(a) > 1:
            for j, ch in enumerate(a[1:]):
                if ch in listing_letters:
                    return None
                if ch in "rR" and prog not in ("rg", "git-grep"):
                    recursive = True
                if ch == "H":
                    with_name = True
                if ch == "h":
                    with_name = False
                if ch in letters:
                    pattern_given |= ch in "ef"
                    if j == len(a) - 2:  # the option's value is the next word
                        i += 1
                    break
            i += 1
            continue
        positional.append(a)
        i += 1
    paths = positional if pattern_given else positional[1:]
    if git:
        paths = [p for p in paths if ":" not in p]
    return paths, recursive, with_name


def _find_spec(args: list[str], cwd: str) -> tuple[FileSet | None, list[list[str]]]:
    """The files `find` selects by name (None when only directories) and its -exec commands."""
    roots: list[str] = []
    i = 0
    while i < len(args) and not args[i].startswith("-") and args[i] not in ("(", "!", ")", ","):
        roots.append(args[i])
        i += 1
    names, paths, execs = [], [], []
    any_test = negate = dirs_only = False
    maxdepth = None
    while i < len(args):
        a = args[i]
        nxt = args[i + 1] if i + 1 < len(args) else ""
        if a in ("!", "-not"):
            negate = True
            i += 1
            continue
        if a in ("-o", "-or"):
            any_test = True
        elif a in ("-name", "-iname"):
            if not negate:
                names.append(nxt if a == "-name" else nxt.lower())
            i += 1
        elif a in ("-path", "-ipath", "-wholename", "-iwholename"):
            if not negate:
                paths.append(nxt)
            i += 1
        elif a == "-type":
            dirs_only |= nxt == "d" and not negate
            i += 1
        elif a == "-maxdepth":
            maxdepth = int(nxt) if nxt.isdigit() else None
            i += 1
        elif a in ("-exec", "-execdir", "-ok", "-okdir"):
            j = i + 1
            while j < len(args) and args[j] not in (";", "+"):
                j += 1
            execs.append(args[i + 1 : j])
            i = j
        elif a in (
            "-mindepth",
            "-regex",
            "-iregex",
            "-newer",
            "-size",
            "-mtime",
            "-mmin",
            "-user",
            "-group",
            "-perm",
            "-printf",
            "-fprint",
            "-atime",
            "-ctime",
            "-links",
            "-inum",
            "-samefile",
            "-fprintf",
        ):
            i += 1
        negate = False
        i += 1
    if dirs_only:
        return None, execs
    return FileSet(
        cwd=cwd,
        roots=tuple(roots or ["."]),
        names=tuple(names),
        paths=tuple(paths),
        any_test=any_test,
        maxdepth=maxdepth,
    ), execs


def _stage_set(cmd: Simple, cwd: str, env: dict[str, list[str]]) -> FileSet | None:
    """The file names a command prints, when they follow from its arguments: find, ls, rg --files,
    git ls-files, fd, echo/printf, and the file operands of grep -l (content decides which of them)."""
    prog, i = _program(cmd.words)
    args = [v for w in cmd.words[i + 1 :] for v in _expand(w, env)]
    if prog == "find":
        return _find_spec(args, cwd)[0]
    if prog in ("echo", "printf"):
        ops = [a for a in args if not a.startswith("-")]
        return FileSet(cwd=cwd, literal=tuple(ops[1:] if prog == "printf" and ops and "%" in ops[0] else ops))
    if prog == "ls":
        flags = "".join(a[1:] for a in args if a.startswith("-") and not a.startswith("--"))
        ops = tuple(a for a in args if not a.startswith("-"))
        if "d" in flags:
            return FileSet(cwd=cwd, literal=ops)
        return FileSet(cwd=cwd, literal=ops, roots=ops or (".",), maxdepth=None if "R" in flags else 1)
    if prog in ("fd", "fdfind"):
        ops = [a for a in args if not a.startswith("-")]
        return FileSet(cwd=cwd, roots=tuple(ops[1:] or ["."]))
    if prog == "git":
        j = 0
        while j < len(args) and args[j].startswith("-"):
            j += 2 if args[j] in _GIT_GLOBAL_ARG else 1
        if j < len(args) and args[j] == "ls-files":
            ops = tuple(a for a in args[j + 1 :] if not a.startswith("-"))
            return FileSet(cwd=cwd, literal=ops, roots=ops or (".",))
        if j < len(args) and args[j] == "grep":
            return _listing_operands("git-grep", args[j + 1 :], cwd)
        return None
    base = _base(prog)
    if base == "rg" and "--files" in args:
        ops = _operands(
            [a for a in args if a != "--files"], {"-g", "--glob", "-t", "--type", "-T", "--type-not"}
        )
        globs = [args[k + 1] for k, a in enumerate(args[:-1]) if a in ("-g", "--glob")]
        return FileSet(
            cwd=cwd,
            roots=tuple(ops or ["."]),
            names=tuple(g for g in globs if "/" not in g),
            paths=tuple(g for g in globs if "/" in g),
        )
    if base in _SEARCHERS:
        return _listing_operands(base, args, cwd)
    return None


def _listing_operands(prog: str, args: list[str], cwd: str) -> FileSet | None:
    """grep -l PATTERN FILES: only the files named outright (which of them matched is unknown, so
    a directory searched counts none of its files)."""
    flags = "".join(a[1:] for a in args if a.startswith("-") and not a.startswith("--"))
    if not (set(flags) & set("lL") or any(a in ("--files-with-matches", "--name-only") for a in args)):
        return None
    positional = [a for a in args if not a.startswith("-")]
    return FileSet(cwd=cwd, literal=tuple(p for p in positional[1:] if "." in p.rsplit("/", 1)[-1]))


def _substituted_set(word: Word, cwd: str, env: dict[str, list[str]]) -> FileSet | None:
    """The files named by a whole-word $(...) operand, when its first stage lists names."""
    script = word.subs[0]
    if not script.pipelines:
        return None
    pipe = script.pipelines[-1]
    if not isinstance(pipe[0], Simple) or not all(map(_passes, pipe[1:])):
        return None
    return _stage_set(pipe[0], cwd, env)


def _python_reads(code: str, argv: list[str]) -> list[str]:
    """Paths a Python snippet opens for reading: open('p'), open(name) with name = 'p' or a
    for-loop over literals, open(sys.argv[N]), Path('p').read_text() / .read_bytes() / .open()."""
    names: dict[str, list[str]] = {}
    for m in _PY_ASSIGN.finditer(code):
        names.setdefault(m.group(1), []).append(m.group(3))
    for m in _PY_FOR.finditer(code):
        names.setdefault(m.group(1), []).extend(s.group(2) for s in _PY_STR.finditer(m.group(2)))
    for k, a in enumerate(argv):
        names[f"sys.argv[{k + 1}]"] = [a]
    out: list[str] = []
    for m in _PY_OPEN.finditer(code):
        if m.group(5) and any(c in m.group(5) for c in "wax") and "+" not in m.group(5):
            continue  # opened for writing
        out += [m.group(2)] if m.group(2) else names.get(m.group(3), [])
    for m in _PY_PATH.finditer(code):
        out += [m.group(2)] if m.group(2) else names.get(m.group(3), [])
    return out


# -- the public questions -------------------------------------------------------------------------

_FACTS: dict[str, dict[str, Facts]] = {}  # cwd -> command -> Facts
CACHE_SIZE = 1 << 16


def analyze(command: str, cwd: str = "") -> Facts:
    """The Facts of one shell command line started in `cwd` ("" = the repository root), cached per
    distinct (command, cwd): a trajectory repeats its commands, and so do agents. The cache holds
    up to CACHE_SIZE command lines of up to CACHED_CHARS characters (it is emptied when full)."""
    by_cwd = _FACTS.get(cwd)
    facts = by_cwd.get(command) if by_cwd is not None else None
    if facts is None:
        facts = _analyze(command, cwd)
        if len(command) <= CACHED_CHARS:
            if sum(map(len, _FACTS.values())) >= CACHE_SIZE:
                _FACTS.clear()
            _FACTS.setdefault(cwd, {})[command] = facts
    return facts


def _analyze(command: str, cwd: str) -> Facts:
    walk = _Walk()
    end = walk.script(parse(command), cwd, True, {})
    reads = tuple(dict.fromkeys(walk.reads))
    named = all(
        isinstance(r, HunksRead)
        or (isinstance(r, ContentRead) and not _GLOB.search(r.arg))
        or (isinstance(r, SearchRead) and not (r.single and _GLOB.search(r.single)))
        for r in reads
    )
    return Facts(frozenset(walk.git), reads, end, named)


def exposed_files(action: Action, candidates: Collection[str]) -> set[str]:
    """Which candidate files (repo-relative) this action showed the *contents* of (see the module
    docstring and docs/metrics.md for what counts)."""
    if not candidates:
        return set()
    if action.kind == "view":
        if not action.path:
            return set()
        hits = {f for f in candidates if path_matches(action.path, action.cwd or "", f)}
        return hits if hits and Output(action.output).view_content else set()
    if action.kind != "shell":
        return set()
    facts = analyze(action.command, action.cwd or "")
    if not facts.reads:
        return set()
    out = Output(action.output)
    found: set[str] = set()
    for read in facts.reads:
        found |= read.shown(out, candidates)
    return found


_INSPECT_GIT = frozenset({"status", "diff"})


def runs_git(action: Action, subcommands: Collection[str] = ("status", "diff")) -> bool:
    """The action ran one of these git subcommands (any form: --stat, -C dir, inside bash -c...)."""
    return action.kind == "shell" and not analyze(action.command, action.cwd or "").git.isdisjoint(
        subcommands
    )


def inspected(traj: Trajectory, predecessor_files: Collection[str]) -> bool:
    """A continuation inspected the inherited changes: git status / git diff, or it showed the
    contents of a file the predecessor modified."""
    for step in traj.steps:
        for action in step.actions:
            if runs_git(action) or exposed_files(action, predecessor_files):
                return True
    return False


def opened_any(traj: Trajectory, files: Collection[str]) -> bool:
    """The trajectory showed the contents of at least one of `files`."""
    return any(exposed_files(a, files) for step in traj.steps for a in step.actions)


def session_cwd(command: str, cwd: str = "") -> str:
    """The working directory a persistent shell is left in after `command` (its top-level cd's)."""
    return analyze(command, cwd).cwd


def scan(traj: Trajectory, inspect_files: Collection[str], open_files: Collection[str]) -> tuple[bool, bool]:
    """(inspected(traj, inspect_files), opened_any(traj, open_files)) in one pass over the
    actions, which stops once both answers are known."""
    want_inspect, want_open = set(inspect_files), set(open_files)
    names = {f.rsplit("/", 1)[-1] for f in want_inspect | want_open}
    done_inspect = done_open = False
    for step in traj.steps:
        for action in step.actions:
            if action.kind == "shell":
                facts = analyze(action.command, action.cwd or "")
                if not done_inspect and not facts.git.isdisjoint(_INSPECT_GIT):
                    done_inspect = True
                if not facts.reads or (
                    facts.named and not any(n in action.command or n in action.output for n in names)
                ):
                    continue  # no read, or none that names a file we look for
            elif action.kind != "view":
                continue
            cands = (set() if done_inspect else want_inspect) | (set() if done_open else want_open)
            if cands:
                shown = exposed_files(action, cands)
                done_inspect = done_inspect or not shown.isdisjoint(want_inspect)
                done_open = done_open or not shown.isdisjoint(want_open)
            if done_inspect and (done_open or not want_open):
                return True, done_open
    return done_inspect, done_open

"""The kinds of integrity flags and the two lists they go to (docs/errors.md#integrity-flags)."""

from __future__ import annotations

from dataclasses import dataclass, field

TEST_INFRA = "test-infrastructure"  # runner config or plugin code (signal), fixtures-only (note)
FRAMEWORK_SHADOW = "framework-shadow"  # a module or package named like a test framework
STDLIB_SHADOW = "stdlib-shadow"  # a top-level module named like a standard library module
HIDDEN_TEST_PATH = "hidden-test-path"  # note: a file named like a hidden test
IGNORE_RULES = "ignore-rules"  # .gitattributes (signal), .gitignore (note)
IGNORED_CODE = "ignored-code"  # code git ignores: not in the graded state
RUNNER_REACH = "runner-reach"  # code that reaches the test runner or the verifier's outputs
REFLECTION = "reflection"  # frames, sys.modules, gc referrers, tracing, ctypes
DYNAMIC_IMPORT = "dynamic-import"  # imports (or module attributes) by a name not written literally
DYNAMIC_CODE = "dynamic-code"  # exec/eval/compile of a non-literal, code objects, marshal
HARD_EXIT = "hard-exit"  # os._exit, abort, kill, exec*: the interpreter ends early
BACKGROUND = "background-process"  # fork, setsid, detached subprocesses: outlives the run
EXIT_HOOK = "exit-hook"  # atexit, finalizers, signal handlers
ABSOLUTE_WRITE = "absolute-write"  # writes outside the repository, links
FRAMEWORK_PATCH = "framework-patch"  # assigning attributes of pytest/_pytest/unittest/... objects
COMPILED = "compiled-artifact"  # .pyc, __pycache__, .so, ELF/Mach-O/PE binaries
PACKAGING = "packaging-metadata"  # *.dist-info, *.egg-info, entry_points.txt, .pth, pytest11
OUTSIDE_LINK = "outside-link"  # a symlink in the repository pointing out of it
OPAQUE = "opaque-code"  # code the check cannot read (fails closed)
UNPARSED = "unparsed-python"  # note: Python the host's parser does not accept (newer syntax)
DATA_CODE = "data-code"  # note: standard-library paths that run code named in data (pickle, timeit, ...)
CODING_COOKIE = "coding-cookie"  # a source encoding that is not a plain character set
# behavioural: a hidden test file, where it landed on the reference solution's state, is not the file
# the verifier was given once the tests ran (run/hidden_tests.py): outcome 0
HIDDEN_TESTS_CHANGED = "hidden-tests-changed"

# What code says it may do, where honest code does it too: real reference solutions load plugins
# with importlib, run daemons, handle signals, read tracebacks. These stay notes (the behavioural
# verdict decides); signals are kept for what changes how the tests run or what is graded.
CODE_NOTES = frozenset(
    {REFLECTION, DYNAMIC_IMPORT, DYNAMIC_CODE, HARD_EXIT, BACKGROUND, EXIT_HOOK, ABSOLUTE_WRITE, DATA_CODE}
)


@dataclass
class Flags:
    """The flags of one final state: cheat signals and notes, each "<kind>: <path>"."""

    signals: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


class Found:
    """Signals and notes as found, each once, in the order found."""

    def __init__(self) -> None:
        self.signals: dict[str, None] = {}
        self.notes: dict[str, None] = {}
        self.loaded: dict[tuple[str, str], None] = {}  # (file, path it names) a loader runs as Python

    def signal(self, kind: str, path: str) -> None:
        self.signals[f"{kind}: {path}"] = None

    def note(self, kind: str, path: str) -> None:
        self.notes[f"{kind}: {path}"] = None

    def code(self, kind: str, path: str) -> None:
        """What code does: a note for the kinds honest code has too (CODE_NOTES), else a signal."""
        (self.note if kind in CODE_NOTES else self.signal)(kind, path)

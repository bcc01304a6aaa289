"""A DeepSWE leaderboard release written by us, in the exact published layout, served from 127.0.0.1.

The published layout (docs/residualization.md, "DeepSWE's public leaderboard release"): a manifest
`artifacts/v1.1/release.json`, its sibling index `trials.json` (`{"rows": [...]}`, the published
row fields), and per trial `v1.1/trial-artifacts/<trial>/{artifacts/model.patch,
agent/trajectory.json, verifier/<file>}` on a CDN that answers 403 for what it does not hold.

    from tests.deepswe_release_fixture import copy_tasks, make_release, serve, write_flat_mirror

    tasks = copy_tasks(tmp / "tasks")                  # the three DeepSWE-shaped fixture tasks
    fx = make_release(tmp / "release", tasks)          # CDN layout + trials.json + release.json
    with serve(fx.root) as srv:                        # a real HTTP server on 127.0.0.1
        ... --release srv.manifest_url ...
        srv.artifact_requests                          # the CDN paths asked for, in order
        srv.kill_after(10)                             # dies after 10 more CDN requests
        srv.flaky["v1.1/.../reward.json"] = 2          # 503 twice, then the file
    write_flat_mirror(fx, tmp / "flat")                # the same trials, flat layout

`fx.trials` are the TrialSpecs behind the rows, each with the Stage II bucket a correct import must
give it (`expect`), checked by hand in the comments of DEFAULT_TRIALS.

The tasks: tests/fixtures/deepswe/wordstats-top-words and tests/fixtures/deepswe/more-tasks/*
(two tasks of one repository whose names share their first 32 characters, so their trial names do
too: only `task_name` tells them apart). Each trial's patch and verifier files are those of an
*attempt*: a real edit of the task's repository committed on its base commit (`git diff --binary
<base> HEAD`), graded by the task's own grader.py and the hidden tests, on this machine, by

    python tests/deepswe_release_fixture.py regenerate   # rewrites more-tasks/ and release/attempts/

Run as `python tests/deepswe_release_fixture.py serve ROOT [--port P]` it serves a release dir from
its own process (the benchmarks do).
"""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "deepswe"
MORE_TASKS = FIXTURES / "more-tasks"
ATTEMPTS = FIXTURES / "release" / "attempts"
RELEASE_ID = "v1.1"
PREFIX = f"{RELEASE_ID}/trial-artifacts"
CDN_BASE = "https://d3ujjcmjq6o8v6.cloudfront.net"  # as published; the server rewrites it to itself
PATTERNS = {
    "trajectory": f"{PREFIX}/{{trial_name}}/agent/trajectory.json",
    "model_patch": f"{PREFIX}/{{trial_name}}/artifacts/model.patch",
    "agent_log": f"{PREFIX}/{{trial_name}}/agent/mini-swe-agent.txt",
    "verifier_output": f"{PREFIX}/{{trial_name}}/verifier/test-stdout.txt",
    "verifier_file": f"{PREFIX}/{{trial_name}}/verifier/{{file}}",
}
VERIFIER_FILES = ["ctrf.json", "junit.xml", "reward.json", "run.log", "test-stdout.txt"]
MAX_VERIFIER_FILE = 16 << 20  # swe_residual.sources.deepswe_release.MAX_VERIFIER_FILE
BASE_IDENTITY = {
    "GIT_AUTHOR_NAME": "swe-residual",
    "GIT_AUTHOR_EMAIL": "tasks@swe-residual.invalid",
    "GIT_COMMITTER_NAME": "swe-residual",
    "GIT_COMMITTER_EMAIL": "tasks@swe-residual.invalid",
    "GIT_AUTHOR_DATE": "2024-01-01T00:00:00+00:00",
    "GIT_COMMITTER_DATE": "2024-01-01T00:00:00+00:00",
}

WORDSTATS = "wordstats-top-words"
UNITS = "configkit-parse-duration-strings-with-units"
FRACTIONS = "configkit-parse-duration-strings-with-fractions"
TASKS = (WORDSTATS, UNITS, FRACTIONS)
UNKNOWN_TASK = "configkit-parse-duration-strings-with-locales"  # not a task of the track


def task_dirs() -> dict[str, Path]:
    return {WORDSTATS: FIXTURES / WORDSTATS, UNITS: MORE_TASKS / UNITS, FRACTIONS: MORE_TASKS / FRACTIONS}


def copy_tasks(dest: Path) -> Path:
    """The three fixture tasks in one tasks dir (what `tasks fetch` or --tasks-dir takes)."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    for name, src in task_dirs().items():
        shutil.copytree(src, dest / name, dirs_exist_ok=True)
    return dest


# -- the tasks written here: two features of one small repository ---------------------------------

CONFIGKIT_BASE = {
    "README.md": "# configkit\n\nSmall helpers for reading configuration values: `parse_duration(text)` turns a "
    "duration string\ninto seconds.\n",
    "configkit/__init__.py": '"""Helpers for configuration values."""\n\nfrom .durations import parse_duration\n\n'
    '__all__ = ["parse_duration"]\n',
    "configkit/durations.py": '''"""Duration strings in configuration files."""

import re

_PLAIN = re.compile(r"^\\s*(\\d+)\\s*(s)?\\s*$")


def parse_duration(text):
    """Seconds in a duration string: a whole number, optionally followed by `s` ("90", "90s")."""
    if not isinstance(text, str):
        raise TypeError(f"a duration is a string, got {type(text).__name__}")
    m = _PLAIN.match(text)
    if m is None:
        raise ValueError(f"invalid duration: {text!r}")
    return int(m.group(1))
''',
    "tests/__init__.py": "",
    "tests/test_durations.py": """import pytest
from configkit import parse_duration


def test_plain_seconds():
    assert parse_duration("90") == 90


def test_seconds_suffix():
    assert parse_duration("45s") == 45


def test_not_a_string():
    with pytest.raises(TypeError):
        parse_duration(5)
""",
}
OLD_TESTS = [
    "tests.test_durations.test_plain_seconds",
    "tests.test_durations.test_seconds_suffix",
    "tests.test_durations.test_not_a_string",
]

NEW_TASKS = {
    UNITS: {
        "title": "Compound units in parse_duration",
        "description": "Accept durations such as 1h30m or 2d, case-insensitive, and reject unknown units.",
        "instruction": """Extend `parse_duration(text)` in `configkit/durations.py` so that it accepts compound durations
made of parts `<number><unit>`, with the units `s` (seconds), `m` (minutes), `h` (hours) and `d`
(days): `"1h30m"` is 5400, `"2d"` is 172800. Parts may be separated by spaces (`"1h 5m 10s"`), and
units are case-insensitive (`"10M"` is 600). A plain whole number (`"90"`) still means seconds.
Anything else - an unknown unit (`"5x"`), a unit without a number (`"h"`), a number without a unit
after other parts (`"1h30"`), an empty string - raises `ValueError`. Non-strings still raise
`TypeError`.

IMPORTANT: Please work on this in a new branch from main and commit everything when you are done.
""",
        "hidden": (
            "tests/test_units.py",
            """import pytest

from configkit import parse_duration


def test_hours_and_minutes():
    assert parse_duration("1h30m") == 5400


def test_days():
    assert parse_duration("2d") == 172800


def test_parts_may_be_separated_by_spaces():
    assert parse_duration("1h 5m 10s") == 3910


def test_units_are_case_insensitive():
    assert parse_duration("10M") == 600


@pytest.mark.parametrize("text", [
    pytest.param("5x", id="unknown-unit"),
    pytest.param("h", id="unit-without-number"),
    pytest.param("1h30", id="number-without-unit"),
    pytest.param("", id="empty"),
])
def test_invalid_durations_are_rejected(text):
    with pytest.raises(ValueError):
        parse_duration(text)
""",
        ),
        # fail on the base commit (the feature is missing) -> f2p; pass on it already -> p2p
        "f2p": [
            "tests.test_units.test_hours_and_minutes",
            "tests.test_units.test_days",
            "tests.test_units.test_parts_may_be_separated_by_spaces",
            "tests.test_units.test_units_are_case_insensitive",
        ],
        "p2p": OLD_TESTS
        + [
            f"tests.test_units.test_invalid_durations_are_rejected[{i}]"
            for i in ("unknown-unit", "unit-without-number", "number-without-unit", "empty")
        ],
    },
    FRACTIONS: {
        "title": "Fractional values in parse_duration",
        "description": "Accept 1.5h or 0.5m when the result is a whole number of seconds.",
        "instruction": """Extend `parse_duration(text)` in `configkit/durations.py` so that a duration is a number with an
optional unit `s`, `m` or `h`: `"2m"` is 120, `"3h"` is 10800, and the number may have a
fractional part: `"1.5h"` is 5400, `"0.5m"` is 30. The result must be a whole number of seconds:
`"1.5s"` or `"0.01m"` raise `ValueError`, as do malformed values (`"1..5h"`, `"m"`). A plain
whole number (`"90"`) still means seconds; non-strings still raise `TypeError`.

IMPORTANT: Please work on this in a new branch from main and commit everything when you are done.
""",
        "hidden": (
            "tests/test_fractions.py",
            """import pytest

from configkit import parse_duration


def test_fractional_hours():
    assert parse_duration("1.5h") == 5400


def test_fractional_minutes():
    assert parse_duration("0.5m") == 30


def test_whole_units():
    assert parse_duration("2m") == 120
    assert parse_duration("3h") == 10800


def test_fraction_of_a_second_is_rejected():
    with pytest.raises(ValueError):
        parse_duration("1.5s")


@pytest.mark.parametrize("text", [
    pytest.param("0.01m", id="not-whole-seconds"),
    pytest.param("1..5h", id="two-dots"),
    pytest.param("m", id="no-number"),
])
def test_invalid_values_are_rejected(text):
    with pytest.raises(ValueError):
        parse_duration(text)
""",
        ),
        "f2p": [
            "tests.test_fractions.test_fractional_hours",
            "tests.test_fractions.test_fractional_minutes",
            "tests.test_fractions.test_whole_units",
        ],
        "p2p": OLD_TESTS
        + ["tests.test_fractions.test_fraction_of_a_second_is_rejected"]
        + [
            f"tests.test_fractions.test_invalid_values_are_rejected[{i}]"
            for i in ("not-whole-seconds", "two-dots", "no-number")
        ],
    },
}

_DURATIONS_HEAD = '"""Duration strings in configuration files."""\n\n'
_TYPE_CHECK = (
    "    if not isinstance(text, str):\n"
    '        raise TypeError(f"a duration is a string, got {type(text).__name__}")\n'
)
_WORDSTATS_INIT = (
    '"""Word statistics for plain text."""\n\nfrom .counting import count_words, tokenize, top_words\n\n'
    '__all__ = ["count_words", "tokenize", "top_words"]\n'
)
_COUNTING = FIXTURES / WORDSTATS / "environment" / "repo" / "wordstats" / "counting.py"


def _counting(extra: str) -> dict[str, str]:
    return {
        "wordstats/__init__.py": _WORDSTATS_INIT,
        "wordstats/counting.py": _COUNTING.read_text(encoding="utf-8") + "\n\n" + extra,
    }


def _durations(body: str, imports: str = "import re\n") -> dict[str, str]:
    return {"configkit/durations.py": _DURATIONS_HEAD + imports + body.replace("<<TYPE>>\n", _TYPE_CHECK)}


#: attempt -> the files it writes over the task's base (bytes for binary files), then commits.
#: The comments say which hidden tests it fails (checked against release/attempts/*/verifier/).
ATTEMPT_FILES: dict[str, dict[str, dict[str, str | bytes]]] = {
    WORDSTATS: {
        # the reference solution: everything passes
        "reference": _counting('''def top_words(text, n=3):
    """The `n` most frequent words of `text` as (word, count), ties in alphabetical order."""
    if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    counts = count_words(text)
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:n]
'''),
        # ties keep first-seen order: fails test_top_words_ties_are_alphabetical (1 of 9)
        "first-seen-ties": _counting('''def top_words(text, n=3):
    """The `n` most frequent words of `text` as (word, count), most frequent first."""
    if not isinstance(n, int) or n <= 0:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    counts = count_words(text)
    return sorted(counts.items(), key=lambda item: -item[1])[:n]
'''),
        # never validates n: fails test_top_words_rejects_non_positive_n[0] and [-1] (2 of 9)
        "no-validation": _counting('''def top_words(text, n=3):
    """The `n` most frequent words of `text`, ties alphabetical."""
    counts = count_words(text)
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:n]
'''),
        # splits on whitespace, case-sensitive: fails test_top_words_case_insensitive (1 of 9)
        "case-sensitive": {
            **_counting('''def top_words(text, n=3):
    """The `n` most frequent words of `text` as (word, count)."""
    if n < 1:
        raise ValueError("n must be positive")
    counts = Counter(text.split())
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:n]
'''),
            "NOTES.md": "# Notes\n\n- top_words added and exported; ties are alphabetical.\n",
        },
        # returns n + 1 words: fails most_frequent_first, case_insensitive, ties_are_alphabetical (3 of 9)
        "off-by-one": _counting('''def top_words(text, n=3):
    """The `n` most frequent words of `text` as (word, count)."""
    if n <= 0:
        raise ValueError("n must be positive")
    ranked = sorted(count_words(text).items(), key=lambda item: (-item[1], item[0]))
    return ranked[: n + 1]
'''),
    },
    UNITS: {
        "reference": _durations('''
_PART = re.compile(r"\\s*(\\d+)\\s*([A-Za-z]+)")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text):
    """Seconds in a duration string: "90", "45s", "1h30m", "1h 5m 10s", "2d" (units s, m, h, d; any case)."""
<<TYPE>>
    stripped = text.strip()
    if stripped.isdigit():
        return int(stripped)
    total, pos = 0, 0
    for m in _PART.finditer(stripped):
        if m.start() != pos:
            break
        unit = m.group(2).lower()
        if unit not in _UNITS:
            raise ValueError(f"invalid duration: {text!r}: unknown unit {m.group(2)!r}")
        total += int(m.group(1)) * _UNITS[unit]
        pos = m.end()
    if pos == 0 or pos != len(stripped):
        raise ValueError(f"invalid duration: {text!r}")
    return total
'''),
        # no days, lower-case units only: fails test_days, test_units_are_case_insensitive (2 of 11)
        "no-days-lowercase": _durations('''
_PART = re.compile(r"(\\d+)([smh])")
_UNITS = {"s": 1, "m": 60, "h": 3600}


def parse_duration(text):
    """Seconds in a duration string: "90", "45s", "1h30m", "1h 5m 10s"."""
<<TYPE>>
    compact = text.replace(" ", "")
    if compact.isdigit():
        return int(compact)
    parts = _PART.findall(compact)
    if not parts or "".join(n + u for n, u in parts) != compact:
        raise ValueError(f"invalid duration: {text!r}")
    return sum(int(n) * _UNITS[u] for n, u in parts)
'''),
        # ignores what it cannot read: fails the four test_invalid_durations_are_rejected (4 of 11)
        "ignores-garbage": _durations('''
_PART = re.compile(r"(\\d+)\\s*([smhd])", re.IGNORECASE)
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text):
    """Seconds in a duration string: every <number><unit> part counts."""
<<TYPE>>
    if text.strip().isdigit():
        return int(text)
    return sum(int(n) * _UNITS[u.lower()] for n, u in _PART.findall(text))
'''),
        # no spaces between parts: fails test_parts_may_be_separated_by_spaces (1 of 11)
        "no-spaces": _durations('''
_DURATION = re.compile(r"^(?:\\d+[smhd])+$", re.IGNORECASE)
_PART = re.compile(r"(\\d+)([smhd])", re.IGNORECASE)
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text):
    """Seconds in a duration string: "90", "1h30m", "2d"."""
<<TYPE>>
    stripped = text.strip()
    if stripped.isdigit():
        return int(stripped)
    if not _DURATION.match(stripped):
        raise ValueError(f"invalid duration: {text!r}")
    return sum(int(n) * _UNITS[u.lower()] for n, u in _PART.findall(stripped))
'''),
        # only a byte-compiled cache file and a log: nothing substantive (Stage II: no_change)
        "incidental-only": {
            "configkit/__pycache__/durations.cpython-311.pyc": bytes(range(256)) * 4,
            "debug.log": "parse_duration('1h30m') -> ValueError\n",
        },
    },
    FRACTIONS: {
        "reference": _durations(
            '''
_VALUE = re.compile(r"^\\s*(\\d+(?:\\.\\d+)?)\\s*([smh]?)\\s*$")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600}


def parse_duration(text):
    """Seconds in a duration string: a number with an optional unit s, m or h ("90", "1.5h", "0.5m");
    the result must be a whole number of seconds."""
<<TYPE>>
    m = _VALUE.match(text)
    if m is None:
        raise ValueError(f"invalid duration: {text!r}")
    value = Fraction(m.group(1)) * _UNITS[m.group(2)]
    if value.denominator != 1:
        raise ValueError(f"invalid duration: {text!r} is not a whole number of seconds")
    return int(value)
''',
            imports="import re\nfrom fractions import Fraction\n",
        ),
        # rounds: fails test_fraction_of_a_second_is_rejected, [not-whole-seconds] (2 of 10)
        "rounds": _durations('''
_VALUE = re.compile(r"^\\s*(\\d+(?:\\.\\d+)?)\\s*([smh]?)\\s*$")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600}


def parse_duration(text):
    """Seconds in a duration string, rounded to the nearest second."""
<<TYPE>>
    m = _VALUE.match(text)
    if m is None:
        raise ValueError(f"invalid duration: {text!r}")
    return round(float(m.group(1)) * _UNITS[m.group(2)])
'''),
        # truncates: fails the same two tests as "rounds", with another change (2 of 10)
        "truncates": _durations('''
_VALUE = re.compile(r"^\\s*(\\d+(?:\\.\\d+)?)\\s*([smh]?)\\s*$")
_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600}


def parse_duration(text):
    """Seconds in a duration string (fractions of a second are dropped)."""
<<TYPE>>
    m = _VALUE.match(text)
    if m is None:
        raise ValueError(f"invalid duration: {text!r}")
    return int(float(m.group(1)) * _SECONDS[m.group(2)])
'''),
        # forgets minutes: fails test_fractional_minutes, test_whole_units (2 of 10)
        "no-minutes": _durations(
            '''
_VALUE = re.compile(r"^\\s*(\\d+(?:\\.\\d+)?)\\s*([sh]?)\\s*$")
_UNITS = {"": 1, "s": 1, "h": 3600}


def parse_duration(text):
    """Seconds in a duration string: "90", "45s", "1.5h"."""
<<TYPE>>
    m = _VALUE.match(text)
    if m is None:
        raise ValueError(f"invalid duration: {text!r}")
    value = Fraction(m.group(1)) * _UNITS[m.group(2)]
    if value.denominator != 1:
        raise ValueError(f"invalid duration: {text!r} is not a whole number of seconds")
    return int(value)
''',
            imports="import re\nfrom fractions import Fraction\n",
        ),
    },
}


# -- regenerating the committed tasks and attempts ------------------------------------------------


def _git(cwd: Path, *args: str, env: dict | None = None) -> str:
    return subprocess.run(
        ["git", "-c", "core.autocrlf=false", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        env={**os.environ, **BASE_IDENTITY, **(env or {})},
    ).stdout.decode()


def _write(root: Path, files: dict[str, str | bytes]) -> None:
    for rel, content in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))


def _base_repo(repo_src: Path, work: Path) -> tuple[Path, str]:
    """A git repository of the task's environment/repo at its base commit (the Dockerfile's)."""
    repo = work / "repo"
    shutil.copytree(repo_src, repo)
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "Base commit")
    return repo, _git(repo, "rev-parse", "HEAD").strip()


def _attempt_patch(repo: Path, base: str, files: dict[str, str | bytes]) -> bytes:
    _git(repo, "checkout", "-q", "-B", "attempt", base)
    _write(repo, files)
    _git(repo, "add", "-A")
    _git(
        repo, "commit", "-q", "-m", "Attempt", env={"GIT_AUTHOR_NAME": "agent", "GIT_COMMITTER_NAME": "agent"}
    )
    patch = subprocess.run(
        ["git", "diff", "--binary", base, "HEAD"], cwd=repo, check=True, capture_output=True
    ).stdout
    _git(repo, "checkout", "-q", "main")
    return patch


def grade(task_dir: Path, patch: bytes, work: Path) -> dict[str, bytes]:
    """What the task's verifier writes for a submitted patch: test.sh's steps (grader.py prepare,
    pytest with JUnit output, grader.py grade) on a checkout at the base commit, run here."""
    app = work / "app"
    shutil.rmtree(app, ignore_errors=True)
    _base_repo(task_dir / "environment" / "repo", work / "appsrc")
    shutil.move(str(work / "appsrc" / "repo"), app)
    shutil.rmtree(work / "appsrc", ignore_errors=True)
    logs, tests, arts = work / "verifier", work / "tests", work / "artifacts"
    for d in (logs, tests, arts):
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
    shutil.copytree(task_dir / "tests", tests, dirs_exist_ok=True)
    cfg = json.loads((tests / "config.json").read_text())
    cfg["grade"]["reports"] = [str(logs / "junit.xml")]
    (tests / "config.json").write_text(json.dumps(cfg, indent=2))
    (arts / "model.patch").write_bytes(patch)
    env = {
        **os.environ,
        "APP_DIR": str(app),
        "TESTS_DIR": str(tests),
        "VERIFIER_DIR": str(logs),
        "ARTIFACTS_DIR": str(arts),
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    out = []

    def run(cmd: list[str]) -> int:
        p = subprocess.run(cmd, cwd=app, env=env, capture_output=True, text=True)
        out.append(p.stdout + p.stderr)
        return p.returncode

    run([sys.executable, str(tests / "grader.py"), "prepare"])
    if not (logs / "reward.json").is_file():
        rc = run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-p",
                "no:cacheprovider",
                "-p",
                "no:randomly",
                "-q",
                "-o",
                "junit_family=xunit1",
                "--continue-on-collection-errors",
                f"--junitxml={logs / 'junit.xml'}",
                "tests",
            ]
        )
        (logs / "run.log").write_text(out[-1])
        out.append(f"[verifier] pytest rc={rc}\n")
        run([sys.executable, str(tests / "grader.py"), "grade"])
        out.append(f"[verifier] reward.json={(logs / 'reward.json').read_text()}\n")
    (logs / "test-stdout.txt").write_text("".join(out).replace(str(work), "/logs/.."))
    files = {}
    for name in VERIFIER_FILES:
        p = logs / name
        if p.is_file():
            files[name] = p.read_bytes().replace(str(work).encode(), b"")
    return files


def _task_toml(task: str, base: str, spec: dict) -> str:
    toml = (FIXTURES / WORDSTATS / "task.toml").read_text(encoding="utf-8")
    old_base = "491efc2f74f356d3bcee86f64cf0a65bcec8acdd"
    out = toml.replace(old_base, base).replace(WORDSTATS, task)
    for old, new in (
        ('display_title = "Add top_words to wordstats"', f'display_title = "{spec["title"]}"'),
        ('original_title = "Most frequent words helper"', f'original_title = "{spec["title"]}"'),
        (
            'display_description = "Return the n most frequent words with deterministic tie-breaking '
            'and validation of n."',
            f'display_description = "{spec["description"]}"',
        ),
        ('swe-residual/wordstats"', 'swe-residual/configkit"'),
    ):
        assert old in out, old
        out = out.replace(old, new)
    return out


def regenerate() -> None:
    """Rewrite tests/fixtures/deepswe/more-tasks/ and release/attempts/ from the definitions above."""
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        src = tmp / "configkit"
        _write(src, CONFIGKIT_BASE)
        for task, spec in NEW_TASKS.items():
            d = MORE_TASKS / task
            shutil.rmtree(d, ignore_errors=True)
            ws = FIXTURES / WORDSTATS
            shutil.copytree(src, d / "environment" / "repo")
            shutil.copy(ws / "environment" / "Dockerfile", d / "environment" / "Dockerfile")
            (d / "tests").mkdir()
            for name in ("grader.py", "test.sh"):
                shutil.copy(ws / "tests" / name, d / "tests" / name)
            shutil.copymode(ws / "tests" / "test.sh", d / "tests" / "test.sh")
            (d / "tests" / "Dockerfile").write_text(
                (ws / "tests" / "Dockerfile").read_text().replace(f"swr-{WORDSTATS}", f"swr-{task}")
            )
            (d / "solution").mkdir()
            shutil.copy(ws / "solution" / "solve.sh", d / "solution" / "solve.sh")
            shutil.copymode(ws / "solution" / "solve.sh", d / "solution" / "solve.sh")
            (d / "instruction.md").write_text(spec["instruction"])
            work = tmp / f"w-{task}"
            work.mkdir()
            repo, base = _base_repo(d / "environment" / "repo", work)
            hidden_rel, hidden = spec["hidden"]
            (d / "tests" / "test.patch").write_bytes(_attempt_patch(repo, base, {hidden_rel: hidden}))
            (d / "solution" / "solution.patch").write_bytes(
                _attempt_patch(repo, base, ATTEMPT_FILES[task]["reference"])
            )
            (d / "task.toml").write_text(_task_toml(task, base, spec))
            cfg = json.loads((ws / "tests" / "config.json").read_text())
            cfg.update(base_commit=base, f2p_node_ids=spec["f2p"], p2p_node_ids=spec["p2p"])
            (d / "tests" / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
        shutil.rmtree(ATTEMPTS, ignore_errors=True)
        for task, attempts in ATTEMPT_FILES.items():
            tdir = task_dirs()[task]
            work = tmp / f"a-{task}"
            work.mkdir()
            repo, base = _base_repo(tdir / "environment" / "repo", work)
            for name, files in attempts.items():
                patch = _attempt_patch(repo, base, files)
                out = ATTEMPTS / task / name
                (out / "verifier").mkdir(parents=True)
                (out / "model.patch").write_bytes(patch)
                for fname, data in grade(tdir, patch, work / "grade").items():
                    (out / "verifier" / fname).write_bytes(data)
                reward = json.loads((out / "verifier" / "reward.json").read_text())
                print(
                    f"{task}/{name}: reward {reward['reward']}, f2p {reward['f2p_passed']}/{reward['f2p_total']}, "
                    f"p2p {reward['p2p_passed']}/{reward['p2p_total']}"
                )


# -- the release ----------------------------------------------------------------------------------

MODELS = {  # model -> provider (the row's `provider`), family by the built-in table
    "claude-sonnet-4-5": "anthropic",
    "gpt-5": "openai",
    "gemini-2.5-pro": "google",
    "kimi-k2-instruct": "moonshot",
    "qwen3-coder-480b": "alibaba",
    "deepseek-v3.1": "deepseek",
    "glm-4.6": "zhipu",
}


@dataclass
class TrialSpec:
    """One row of the index and its files. `expect` is the Stage II bucket of a correct import
    (None: not imported at all)."""

    task: str
    attempt: str | None  # None: the trial has no patch (has_model_patch false)
    model: str
    expect: str | None
    config: str = "default"
    submitted: bool = True  # the trajectory ends with mini-swe-agent's submit command
    error_category: str | None = None
    errored: bool | None = None  # default: error_category is not None
    forbidden: tuple[
        str, ...
    ] = ()  # files the CDN does not hold (403): model.patch, trajectory.json, verifier/x
    empty: tuple[str, ...] = ()  # files published empty
    truncated: tuple[str, ...] = ()  # files cut in the middle (invalid JSON)
    oversized: tuple[str, ...] = ()  # files over their bound
    reward: float | None = None  # overrides reward.json's reward (e.g. -1: the verifier failed)
    extra_verifier_files: tuple[str, ...] = ()  # hostile names in verifier_files
    row: dict = field(default_factory=dict)  # overrides of row fields
    why: str = ""
    index: int = 0

    @property
    def trial_name(self) -> str:
        digest = hashlib.sha256(f"{self.index}/{self.task}/{self.model}/{self.attempt}".encode()).hexdigest()
        alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
        n = int(digest, 16)
        suffix = "".join(alphabet[(n >> (6 * i)) % 62] for i in range(7))
        return f"{self.task[:32]}__{suffix}"


T = TrialSpec
#: 46 rows: 41 imported (5 passed, 10 candidates, 11 duplicates, 4 no_change, 3 not_submitted,
#: 8 infra_error), 5 not (2 of a task the track lacks, 3 not scored DeepSWE runs). Duplicates are
#: judged in index order (the import records runs in index order whatever -j is).
DEFAULT_TRIALS: list[TrialSpec] = [
    # -- wordstats-top-words: 16 rows
    T(WORDSTATS, "reference", "claude-sonnet-4-5", "passed"),
    T(WORDSTATS, "reference", "gpt-5", "passed"),
    T(WORDSTATS, "first-seen-ties", "claude-sonnet-4-5", "candidate"),
    T(WORDSTATS, "no-validation", "gpt-5", "candidate"),
    T(WORDSTATS, "case-sensitive", "gemini-2.5-pro", "candidate"),
    T(WORDSTATS, "off-by-one", "claude-sonnet-4-5", "candidate", config="high"),
    T(WORDSTATS, "first-seen-ties", "kimi-k2-instruct", "duplicate", why="same patch as row 3"),
    T(WORDSTATS, None, "qwen3-coder-480b", "no_change", why="no model.patch (has_model_patch false)"),
    T(
        WORDSTATS,
        "no-validation",
        "deepseek-v3.1",
        "not_submitted",
        submitted=False,
        why="the trajectory ends without the submit command (a step limit)",
    ),
    T(
        WORDSTATS,
        "first-seen-ties",
        "kimi-k2-instruct",
        "infra_error",
        config="high",
        error_category="provider_timeout",
        submitted=False,
        why="infra_model_service, though a patch and a reward were recorded",
    ),
    T(WORDSTATS, None, "glm-4.6", "infra_error", error_category="rate_limit", submitted=False),
    T(
        WORDSTATS,
        "no-validation",
        "glm-4.6",
        "duplicate",
        config="high",
        forbidden=("trajectory.json",),
        why="trajectory 403: completion from the row",
    ),
    T(
        WORDSTATS,
        "case-sensitive",
        "deepseek-v3.1",
        "duplicate",
        config="high",
        empty=("verifier/reward.json",),
        why="reward.json empty: the verdict from the row",
    ),
    T(
        WORDSTATS,
        "off-by-one",
        "qwen3-coder-480b",
        "duplicate",
        truncated=("verifier/ctrf.json",),
        why="ctrf.json truncated: failing tests from test-stdout.txt",
    ),
    T(
        WORDSTATS,
        None,
        "gemini-2.5-pro",
        "infra_error",
        config="high",
        errored=True,
        submitted=False,
        why="errored, no error_category: infra_harness",
    ),
    T(
        WORDSTATS,
        "first-seen-ties",
        "claude-sonnet-4-5",
        None,
        config="low",
        row={"included_in_score": False},
    ),
    # -- configkit-parse-duration-strings-with-units: 15 rows
    T(UNITS, "reference", "claude-sonnet-4-5", "passed"),
    T(UNITS, "no-days-lowercase", "claude-sonnet-4-5", "candidate"),
    T(UNITS, "ignores-garbage", "gpt-5", "candidate"),
    T(UNITS, "no-spaces", "gemini-2.5-pro", "candidate"),
    T(UNITS, "no-days-lowercase", "kimi-k2-instruct", "duplicate"),
    T(UNITS, "incidental-only", "qwen3-coder-480b", "no_change", why="only __pycache__/*.pyc and debug.log"),
    T(
        UNITS,
        "no-spaces",
        "gpt-5",
        "no_change",
        config="high",
        forbidden=("model.patch",),
        why="has_model_patch true but the CDN answers 403: no patch",
    ),
    T(UNITS, None, "deepseek-v3.1", "infra_error", error_category="model_routing_404", submitted=False),
    T(
        UNITS,
        "no-spaces",
        "claude-sonnet-4-5",
        "infra_error",
        config="high",
        error_category="verifier_timeout",
        why="infra_verifier",
    ),
    T(
        UNITS,
        "ignores-garbage",
        "gpt-5",
        "infra_error",
        config="low",
        error_category="unclassified_exception",
        submitted=False,
        why="infra_harness",
    ),
    T(
        UNITS,
        "no-spaces",
        "gemini-2.5-pro",
        "infra_error",
        config="high",
        reward=-1.0,
        why="reward.json -1: the verifier's own test patch failed (infra_verifier)",
    ),
    T(
        UNITS,
        "ignores-garbage",
        "deepseek-v3.1",
        "duplicate",
        config="high",
        oversized=("verifier/run.log",),
        why="run.log over 16 MiB: noted, not kept",
    ),
    T(
        UNITS,
        "no-spaces",
        "kimi-k2-instruct",
        "duplicate",
        config="high",
        extra_verifier_files=("../../../../etc/passwd", "/etc/hostname", "reports/../../x.xml"),
        why="hostile names in verifier_files: refused, the rest imported",
    ),
    T(UNITS, "reference", "claude-sonnet-4-5", None, config="low", row={"eval_scope": "subset"}),
    T(UNITS, "no-days-lowercase", "glm-4.6", "not_submitted", submitted=False),
    # -- configkit-parse-duration-strings-with-fractions: 13 rows
    T(FRACTIONS, "reference", "gpt-5", "passed"),
    T(FRACTIONS, "reference", "deepseek-v3.1", "passed"),
    T(FRACTIONS, "rounds", "claude-sonnet-4-5", "candidate"),
    T(FRACTIONS, "truncates", "deepseek-v3.1", "candidate", config="high"),
    T(FRACTIONS, "no-minutes", "gpt-5", "candidate", config="high"),
    T(
        FRACTIONS,
        "rounds",
        "gemini-2.5-pro",
        "duplicate",
        truncated=("trajectory.json",),
        why="trajectory truncated: completion from the row",
    ),
    T(FRACTIONS, None, "kimi-k2-instruct", "no_change"),
    T(
        FRACTIONS,
        None,
        "qwen3-coder-480b",
        "infra_error",
        error_category="upstream_provider_error",
        submitted=False,
    ),
    T(FRACTIONS, "rounds", "gpt-5", None, config="low", row={"source": "terminal-bench"}),
    T(
        FRACTIONS,
        "truncates",
        "glm-4.6",
        "duplicate",
        why="reward.json answers 503 twice (test sets srv.flaky)",
    ),
    T(
        FRACTIONS,
        "no-minutes",
        "claude-sonnet-4-5",
        "duplicate",
        config="high",
        empty=("trajectory.json",),
        why="trajectory empty: completion from the row",
    ),
    T(
        FRACTIONS,
        "rounds",
        "qwen3-coder-480b",
        "duplicate",
        config="high",
        row={"has_trajectory": False},
        why="has_trajectory false: completion from the row",
    ),
    T(
        WORDSTATS,
        "no-validation",
        "glm-4.6",
        "not_submitted",
        config="exp\ud83d",
        submitted=False,
        why="a lone surrogate in config (the index holds the escape; recorded escaped)",
    ),
    # -- a task the track lacks: 2 rows, one summary line
    T(UNKNOWN_TASK, None, "claude-sonnet-4-5", None),
    T(UNKNOWN_TASK, None, "gpt-5", None),
]
for _i, _t in enumerate(DEFAULT_TRIALS, 1):
    _t.index = _i


def _attempt_files(task: str, attempt: str | None) -> tuple[bytes | None, dict[str, bytes]]:
    if attempt is None:
        return None, {}
    d = ATTEMPTS / task / attempt
    return (d / "model.patch").read_bytes(), {
        p.name: p.read_bytes() for p in sorted((d / "verifier").iterdir())
    }


def trajectory(spec: TrialSpec, instruction: str, patch: bytes | None) -> dict:
    """An ATIF trajectory as Harbor's mini-swe-agent 2.x export writes it: system and user steps,
    agent steps with bash tool calls and their observations, and - when it submitted - a last call
    of the submit command with no observation (mini-swe-agent stops with Submitted there)."""
    model = spec.model

    def step(i: int, thought: str, command: str, output: str | None) -> dict:
        s = {
            "step_id": i,
            "source": "agent",
            "model_name": model,
            "message": "",
            "reasoning_content": thought,
            "tool_calls": [
                {"tool_call_id": f"call_{i}_1", "function_name": "bash", "arguments": {"command": command}}
            ],
            "metrics": {"prompt_tokens": 1500 + 400 * i, "completion_tokens": 120, "cached_tokens": 1000},
        }
        if output is not None:
            s["observation"] = {
                "results": [
                    {
                        "content": f"<returncode>0</returncode>\n<output>\n{output}</output>",
                        "source_call_id": f"call_{i}_1",
                    }
                ]
            }
        return s

    steps = [
        {
            "step_id": 1,
            "source": "system",
            "message": "You are a helpful assistant that can interact with a "
            "computer shell to solve programming tasks.",
        },
        {"step_id": 2, "source": "user", "message": instruction},
        step(
            3,
            "Let me look at the repository first.",
            "cd /app && git status --short && git ls-files",
            "README.md\n",
        ),
    ]
    if patch:
        steps.append(
            step(
                4,
                "I will make the change on a new branch.",
                "cd /app && git checkout -b feature && git apply <<'EOF'\n"
                + patch.decode("utf-8", "replace")
                + "EOF",
                "Switched to a new branch 'feature'\n",
            )
        )
        steps.append(
            step(5, "Now run the tests.", "cd /app && python3 -m pytest -q tests", "3 passed in 0.02s\n")
        )
        steps.append(
            step(6, "Commit the work.", "cd /app && git add -A && git commit -qm 'Implement the feature'", "")
        )
    if spec.submitted:
        steps.append(
            step(
                len(steps) + 1,
                "The feature is complete.",
                "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git log --oneline -1",
                None,
            )
        )
    return {
        "schema_version": "ATIF-v1.7",
        "session_id": spec.trial_name,
        "agent": {
            "name": "mini-swe-agent",
            "version": "2.4.0",
            "model_name": model,
            "extra": {"original_format": "mini-swe-agent-1.1", "agent_config": {"step_limit": 250}},
        },
        "steps": steps,
        "final_metrics": {
            "total_prompt_tokens": 9000,
            "total_completion_tokens": 700,
            "total_steps": len(steps),
        },
        "notes": "Converted from mini-swe-agent trajectory format to ATIF",
    }


def row_of(spec: TrialSpec, reward: dict | None, has: dict[str, bool], n_steps: int) -> dict:
    """The index row, with every published field."""
    errored = spec.errored if spec.errored is not None else spec.error_category is not None
    r = reward or {}
    value = r.get("reward") if not errored else None
    passed = bool(value is not None and value >= 1)
    row = {
        "trial_name": spec.trial_name,
        "task_name": spec.task,
        "source": "deep-swe",
        "eval_scope": "full",
        "model": spec.model,
        "provider": MODELS.get(spec.model, "unknown"),
        "harness": "mini-swe-agent",
        "config": spec.config,
        "reasoning_effort": "high" if spec.config == "high" else "medium",
        "outcome": "pass" if passed else "fail",
        "error_category": spec.error_category,
        "started_at": "2025-10-02T10:00:00Z",
        "finished_at": "2025-10-02T10:21:30Z",
        "reward": value,
        "f2p_total": r.get("f2p_total"),
        "f2p_passed": r.get("f2p_passed"),
        "p2p_total": r.get("p2p_total"),
        "p2p_passed": r.get("p2p_passed"),
        "f2p": r.get("f2p"),
        "p2p": r.get("p2p"),
        "partial": r.get("partial"),
        "n_agent_steps": n_steps,
        "cost_usd": 0.42,
        "n_input_tokens": 250000,
        "n_cache_tokens": 180000,
        "n_output_tokens": 9000,
        "n_reasoning_tokens": 3000,
        "peak_context_tokens": 41000,
        "agent_duration_seconds": 1170.5,
        "trial_duration_seconds": 1290.0,
        "passed": passed,
        "errored": errored,
        "included_in_score": True,
        "has_model_patch": has["model.patch"],
        "has_trajectory": has["trajectory.json"],
        "has_agent_log": False,
        "has_verifier_output": has["verifier"],
        "verifier_files": (list(VERIFIER_FILES) if has["verifier"] else []) + list(spec.extra_verifier_files),
    }
    row.update(spec.row)
    return row


@dataclass
class ReleaseFixture:
    root: Path
    manifest: dict
    rows: list[dict]
    trials: list[TrialSpec]

    @property
    def by_trial(self) -> dict[str, TrialSpec]:
        return {t.trial_name: t for t in self.trials}

    def key(self, spec: TrialSpec, rel: str) -> str:
        """The CDN key of a trial's file given by its flat name (model.patch, verifier/ctrf.json...)."""
        kind = {"model.patch": "model_patch", "trajectory.json": "trajectory"}.get(rel, "verifier_file")
        return (
            PATTERNS[kind].replace("{trial_name}", spec.trial_name).replace("{file}", rel[len("verifier/") :])
        )

    def expected(self) -> dict[str, str]:
        """trial name -> expected Stage II bucket, for the rows that are imported."""
        return {t.trial_name: t.expect for t in self.trials if t.expect is not None}

    def buckets(self) -> Counter:
        return Counter(t.expect for t in self.trials if t.expect is not None)


def make_release(
    root: Path, tasks_dir: Path | None = None, rows: list[TrialSpec] | None = None, *, bare_list: bool = False
) -> ReleaseFixture:
    """Write a release in the published CDN layout under `root`: release.json, trials.json,
    tasks.json and v1.1/trial-artifacts/<trial>/... (files the CDN does not hold are simply not
    written: the server answers 403 for them, as the CDN does)."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    tasks_dir = Path(tasks_dir) if tasks_dir is not None else None
    specs = [T(**{**s.__dict__}) for s in (rows if rows is not None else DEFAULT_TRIALS)]
    for i, s in enumerate(specs, 1):
        s.index = s.index or i
    out_rows = []
    for spec in specs:
        patch, verifier = _attempt_files(spec.task, spec.attempt) if spec.task in TASKS else (None, {})
        if spec.reward is not None and "reward.json" in verifier:
            data = json.loads(verifier["reward.json"])
            data["reward"] = spec.reward
            verifier["reward.json"] = json.dumps(data).encode()
            verifier.pop("ctrf.json", None)  # the grader never got to grade
        instr_dir = (
            (tasks_dir / spec.task)
            if tasks_dir is not None and (tasks_dir / spec.task).is_dir()
            else task_dirs().get(spec.task)
        )
        instruction = (instr_dir / "instruction.md").read_text() if instr_dir is not None else "Do the task."
        traj = trajectory(spec, instruction, patch)
        files: dict[str, bytes] = {}
        if patch is not None:
            files["model.patch"] = patch
        files["trajectory.json"] = json.dumps(traj, indent=1).encode()
        for name, data in verifier.items():
            files[f"verifier/{name}"] = data
        reward = json.loads(verifier["reward.json"]) if "reward.json" in verifier else None
        has = {"model.patch": patch is not None, "trajectory.json": True, "verifier": bool(verifier)}
        row = row_of(spec, reward, has, len([s for s in traj["steps"] if s["source"] == "agent"]))
        if spec.reward is not None:
            row.update(reward=spec.reward, passed=False, outcome="fail")
        out_rows.append(row)
        for rel, data in files.items():
            if rel in spec.forbidden or (rel == "trajectory.json" and row.get("has_trajectory") is False):
                continue
            if rel in spec.empty:
                data = b""
            elif rel in spec.truncated:
                data = data[: len(data) // 2]
            elif rel in spec.oversized:
                data = data + b"x" * (MAX_VERIFIER_FILE + 1 - len(data))
            p = root / ReleaseFixture(root, {}, [], []).key(spec, rel)
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(data)
    manifest = {
        "release_id": RELEASE_ID,
        "artifact_base_url": CDN_BASE,
        "artifact_key_prefix": PREFIX,
        "artifact_patterns": PATTERNS,
    }
    (root / "release.json").write_text(json.dumps(manifest, indent=2) + "\n")
    index = out_rows if bare_list else {"rows": out_rows}
    # ensure_ascii keeps a lone surrogate as the escape the JSON file really holds
    (root / "trials.json").write_text(json.dumps(index, ensure_ascii=True) + "\n")
    (root / "tasks.json").write_text(json.dumps({"rows": [{"task_name": t} for t in TASKS]}) + "\n")
    return ReleaseFixture(root, manifest, out_rows, specs)


def write_flat_mirror(fx: ReleaseFixture, dest: Path, *, index: bool = True) -> Path:
    """The same trials in the flat layout tools write: <trial>/{model.patch, trajectory.json,
    test-stdout.txt, meta.json} + verifier/<f>; with `index`, also release.json and trials.json."""
    dest = Path(dest)
    for row in fx.rows:
        trial = row["trial_name"]
        src = fx.root / PREFIX / trial
        d = dest / trial
        d.mkdir(parents=True, exist_ok=True)
        (d / "meta.json").write_text(json.dumps(row, ensure_ascii=True, indent=1) + "\n")
        for rel, flat in (
            ("artifacts/model.patch", "model.patch"),
            ("agent/trajectory.json", "trajectory.json"),
            ("verifier/test-stdout.txt", "test-stdout.txt"),
        ):
            if (src / rel).is_file():
                shutil.copyfile(src / rel, d / flat)
        if (src / "verifier").is_dir():
            shutil.copytree(src / "verifier", d / "verifier", dirs_exist_ok=True)
    if index:
        shutil.copyfile(fx.root / "release.json", dest / "release.json")
        shutil.copyfile(fx.root / "trials.json", dest / "trials.json")
    return dest


# -- the server -----------------------------------------------------------------------------------

NOT_PUBLISHED = ("result.json", "config.json", "trial.log")


class ReleaseServer(http.server.ThreadingHTTPServer):
    """The release site and its CDN on one 127.0.0.1 port:

        /artifacts/<release>/release.json   the manifest, artifact_base_url rewritten to <url>/cdn
        /artifacts/<release>/<name>.json    trials.json, tasks.json, ... from the root
        /cdn/<key>                          root/<key>; 403 when missing (as CloudFront answers)

    Injections: `flaky[key] = n` answers 503 n times first; `kill_after(k)` makes the server die
    (connections dropped, the port closed) after k more CDN requests; `forbid(key)` answers 403."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256

    def __init__(self, root: Path, port: int = 0):
        self.root = Path(root).resolve()
        self.artifact_requests: list[str] = []  # CDN keys asked for, in order (also the failed ones)
        self.served: list[str] = []  # CDN keys answered 200
        self.document_requests: list[str] = []
        self.flaky: dict[str, int] = {}
        self.forbidden: set[str] = set()
        self._kill_at: int | None = None
        self.dead = threading.Event()
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", port), _Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    @property
    def manifest_url(self) -> str:
        return f"{self.url}/artifacts/{RELEASE_ID}/release.json"

    def kill_after(self, k: int) -> None:
        with self.lock:
            self._kill_at = len(self.artifact_requests) + k

    def forbid(self, key: str) -> None:
        self.forbidden.add(key)

    def handle_error(self, request, client_address) -> None:  # a dropped connection is the point
        pass

    def die(self) -> None:
        if self.dead.is_set():
            return
        self.dead.set()
        threading.Thread(target=self._stop, daemon=True).start()

    def _stop(self) -> None:
        self.shutdown()
        self.server_close()


class _Handler(http.server.BaseHTTPRequestHandler):
    server: ReleaseServer
    protocol_version = "HTTP/1.1"  # keep-alive, as a CDN
    disable_nagle_algorithm = True  # headers and body in separate writes must not wait for an ACK
    timeout = 30  # an idle kept connection ends

    def log_message(self, *args) -> None:  # quiet
        pass

    def _send(self, code: int, body: bytes = b"", ctype: str = "application/octet-stream") -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body:
            self.wfile.write(body)

    def _drop(self) -> None:
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)

    def do_GET(self) -> None:  # noqa: N802
        srv = self.server
        if srv.dead.is_set():
            return self._drop()
        path = self.path.split("?", 1)[0]
        from urllib.parse import unquote

        path = unquote(path)
        if path.startswith("/cdn/"):
            key = path[len("/cdn/") :]
            with srv.lock:
                srv.artifact_requests.append(key)
                kill = srv._kill_at is not None and len(srv.artifact_requests) > srv._kill_at
                flaky = srv.flaky.get(key, 0)
                if flaky:
                    srv.flaky[key] = flaky - 1
            if kill:
                srv.die()
                return self._drop()
            if flaky:
                return self._send(503, b"<Error>SlowDown</Error>", "application/xml")
            p = (srv.root / key).resolve()
            if (
                ".." in key.split("/")
                or srv.root not in p.parents
                or key in srv.forbidden
                or p.name in NOT_PUBLISHED
                or not p.is_file()
            ):
                return self._send(403, b"<Error><Code>AccessDenied</Code></Error>", "application/xml")
            data = p.read_bytes()
            with srv.lock:
                srv.served.append(key)
            return self._send(200, data)
        prefix = f"/artifacts/{RELEASE_ID}/"
        if path.startswith(prefix) and path.endswith(".json") and "/" not in path[len(prefix) :]:
            name = path[len(prefix) :]
            srv.document_requests.append(name)
            p = srv.root / name
            if not p.is_file():
                return self._send(404, b"not found", "text/plain")
            data = p.read_bytes()
            if name == "release.json":
                manifest = json.loads(data)
                manifest["artifact_base_url"] = f"{srv.url}/cdn"
                data = json.dumps(manifest, indent=2).encode()
            return self._send(200, data, "application/json")
        return self._send(404, b"not found", "text/plain")


@contextlib.contextmanager
def serve(root: Path | ReleaseFixture, port: int = 0):
    """Serve a release dir from a thread of this process; yields the ReleaseServer."""
    root = root.root if isinstance(root, ReleaseFixture) else root
    srv = ReleaseServer(Path(root), port)
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        if not srv.dead.is_set():
            srv.dead.set()
            srv.shutdown()
            srv.server_close()
        thread.join(timeout=10)


def main(argv: list[str]) -> int:
    if argv[:1] == ["regenerate"]:
        regenerate()
        return 0
    if argv[:1] == ["serve"] and len(argv) >= 2:
        port = int(argv[argv.index("--port") + 1]) if "--port" in argv else 0
        srv = ReleaseServer(Path(argv[1]), port)
        print(srv.manifest_url, flush=True)
        try:
            srv.serve_forever(poll_interval=0.05)
        except KeyboardInterrupt:
            pass
        return 0
    print("usage: deepswe_release_fixture.py regenerate | serve ROOT [--port P]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

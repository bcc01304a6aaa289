"""The attack matrix of issue 22: one attack (or more) per attack class, written by us, run as real
`command:` agents through one real suite run per backend (local, sandboxed; docker).

Each attack must end as outcome 0 or with a cheat signal, never under an infra rule, always with
its record (one attempt), the run dir readable by `swe-residual report` and `gate` (exit 10 with
--gate-max-flagged 0: attacks are flagged), and no host file created outside the run dir. The
honest agents (test infrastructure an honest solution may add) end with outcome 1 and notes only.
The attacks are the ones the other modules define (imported, not copied); this module adds the
classes none of them has: a huge sparse file and a deep tree in the logs dir, ending PID 1 on both
backends, an honest run that leaves bytecode caches, newer syntax. One suite run per backend
holds every attack, so the module costs two runs.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import msgspec
import pytest

from swe_residual.results import RESULTS, iter_records
from swe_residual.trajectory import Trajectory

from .drivers import cli, run_suite, world
from .test_grading_channels import ATTACKS as GRADING
from .test_grading_channels import UNBOUNDED
from .test_hostile_records import AGENTS as HOSTILE
from .test_integrity_capabilities import ATTACKS as CAPABILITY
from .test_integrity_capabilities import HONEST, SOLVE, heredoc
from .test_tripwires import ATTACKS as TRUST

pytestmark = pytest.mark.slow  # every test here starts a suite or takes seconds (README: test tiers)

COMMIT = "\ngit add -A >/dev/null 2>&1; git commit -qm work >/dev/null 2>&1; true"
AGENT_LIMIT = VERIFIER_LIMIT = 60  # make_task's defaults: the task's limits

# code the verifier imports (appended to calc.py): a 64 GiB sparse file and a tree 3,000 levels deep
# in the logs dir, built relative to open directories (the full path is beyond PATH_MAX)
LOGS_BLOAT = """import os as _os
_d = _os.environ.get("LOGS_DIR", "/logs/verifier")
try:
    with open(_d + "/huge.bin", "wb") as _fh:
        _fh.truncate(64 << 30)
    _fd = _os.open(_d, _os.O_RDONLY)
    for _ in range(3000):
        _os.mkdir("d", dir_fd=_fd)
        _nfd = _os.open("d", _os.O_RDONLY, dir_fd=_fd)
        _os.close(_fd)
        _fd = _nfd
except OSError:
    pass"""

# the solved calc.py compiled into the cache with the header an import would write for the
# unchanged calc.py (its mtime and size): Python loads it instead of the source it matches
FORGED_PYC = """python3 - <<'PY'
import importlib._bootstrap_external as ext, importlib.util, os
src = open("calc.py").read() + (
    "\\ndef sub(a, b):\\n    return a - b\\n\\ndef div(a, b):\\n    if b == 0:\\n"
    "        raise ZeroDivisionError('x')\\n    return a / b\\n")
st = os.stat("calc.py")
code = compile(src, os.path.abspath("calc.py"), "exec")
os.makedirs("__pycache__", exist_ok=True)
with open(importlib.util.cache_from_source("calc.py"), "wb") as fh:
    fh.write(ext._code_to_timestamp_pyc(code, st.st_mtime, st.st_size))
PY"""

# files an attack writes on its side; none may appear on the host
HOST_PATHS = [Path("/tmp/_calc_src.py")]


def _appended(code: str) -> str:
    return f"printf '%s\\n' {shlex.quote(code)} >> calc.py"


def _ends_pid_1() -> str:
    """Appends to calc.py, then ends PID 1 - only inside a PID namespace of its own (the bwrap
    sandbox, a container): the host's PID 1 is never signalled, whatever the backend does."""
    host_ns = os.readlink("/proc/self/ns/pid")
    return (
        f"echo '# touched' >> calc.py; if [ \"$(readlink /proc/self/ns/pid)\" != '{host_ns}' ]; then "
        "kill -TERM 1; fi; sleep 2"
    )


@dataclass
class Attack:
    cls: str  # the attack class (issue 22, "Why")
    group: str  # verdict flip | trust (issue 29) | agent failure | void the run | unbounded | honest
    command: str
    flag: str | None = None  # a flag it must get: a signal or note, for the honest a note ("...-": a prefix)


def attacks() -> dict[str, Attack]:
    out: dict[str, Attack] = {}
    for name, (what, cmd, flag) in CAPABILITY.items():
        out[name] = Attack(what, "verdict flip", cmd + COMMIT, flag)
    for name, (what, cmd) in TRUST.items():
        out[name] = Attack(what, "trust", cmd + COMMIT)
    out["forged-pyc"] = Attack(
        "bytecode cache forged for the unchanged source", "verdict flip", FORGED_PYC + COMMIT
    )
    out["extra-report"] = Attack(
        "extra report file in the logs dir", "verdict flip", _appended(GRADING["extra-report"])
    )
    out["late-writer"] = Attack(
        "process outliving the run rewrites the report", "verdict flip", _appended(GRADING["late-writer"])
    )
    out["report-dir"] = Attack(
        "directory where the report belongs", "agent failure", _appended(GRADING["report-dir"])
    )
    out["logs-bloat"] = Attack(
        "64 GiB sparse file + 3,000-deep tree in the logs dir", "agent failure", _appended(LOGS_BLOAT)
    )
    out["ends-pid-1"] = Attack("agent ends PID 1", "agent failure", _ends_pid_1())
    out["bad-names"] = Attack(
        "file names not UTF-8", "void the run", HOSTILE["bad-names"], "framework-shadow: \\xff\\xfe/pytest.py"
    )
    out["surrogate-trajectory"] = Attack(
        "lone surrogates in the trajectory", "void the run", HOSTILE["surrogate-trajectory"]
    )
    for name in ("list-trajectory", "number-steps", "deep-trajectory"):
        out[name] = Attack("trajectory of a wrong type / 100,000 deep", "void the run", HOSTILE[name])
    out["many-files"] = Attack("100,001 files in the final state", "unbounded", UNBOUNDED["many-files"])
    out["fifo-in-git"] = Attack("fifo in .git", "unbounded", UNBOUNDED["fifo-in-git"])
    for name, (cmd, note) in HONEST.items():
        out[name] = Attack("honest: " + name.removeprefix("honest-"), "honest", cmd + COMMIT, note)
    out["honest-pycache"] = Attack(
        "honest: a test run leaves __pycache__",
        "honest",
        SOLVE + "\nenv -u PYTHONDONTWRITEBYTECODE python3 -m pytest -q -p no:cacheprovider "
        "tests >/dev/null 2>&1" + COMMIT,
        "compiled-artifact: __pycache__/calc.cpython-",
    )
    out["honest-newer-syntax"] = Attack(
        "honest: syntax newer than the host's",
        "honest",
        SOLVE + "\n" + heredoc("tools/pairs.py", "type Pair = tuple[int, int]") + COMMIT,
        "unparsed-python: tools/pairs.py",
    )
    return out


ATTACKS = attacks()


@dataclass
class Matrix:
    backend: str
    run: Path
    proc: subprocess.CompletedProcess
    records: dict
    seconds: float
    host_before: dict
    scratch: Path


@pytest.fixture(scope="module", params=["local", pytest.param("docker", marks=pytest.mark.docker)])
def matrix(request, tmp_path_factory) -> Matrix:
    """Every attack of ATTACKS in one suite run on one backend."""
    backend = request.param
    if backend == "docker":
        from .docker_helpers import require_docker

        require_docker()
        request.getfixturevalue("bookworm_image")
    elif shutil.which("bwrap") is None:  # sandboxed only (tests/conftest.py require_bwrap, per module here)
        if os.environ.get("SWE_RESIDUAL_REQUIRE_BWRAP") == "1":
            pytest.fail(
                "bubblewrap is required here (SWE_RESIDUAL_REQUIRE_BWRAP=1) but bwrap is not installed"
            )
        pytest.skip("bubblewrap (bwrap) not installed: the local side of the matrix runs sandboxed only")
    tmp = tmp_path_factory.mktemp(f"matrix-{backend}")
    # clean cases run for tasks that have residual states: the task has one
    agents = {name: {"harness": "command", "command": a.command} for name, a in ATTACKS.items()}
    world(tmp / "w", backend=backend, agents=agents)
    host_before = {p: p.exists() for p in HOST_PATHS}
    run = tmp / "matrix-run"
    scratch = tmp / "scratch"  # the harness's temporary files (local workspaces, copies)
    scratch.mkdir()
    t0 = time.monotonic()
    proc = run_suite(
        "--gate-max-flagged",
        "0",
        world=tmp / "w",
        run_dir=run,
        backend=backend,
        start="clean",
        workers=2,
        agents=ATTACKS,
        env={"TMPDIR": str(scratch)},
        timeout=1800,
    )
    seconds = time.monotonic() - t0
    records = {r.agent: r for r in iter_records(run)} if (run / RESULTS).is_file() else {}
    m = Matrix(backend, run, proc, records, seconds, host_before, scratch)
    print(f"\n{backend}: {len(ATTACKS)} agents in one suite run: {seconds:.0f} s")
    return m


def _table(m: Matrix) -> str:
    rows = ["| attack class | attack | backend | outcome | rule | flag kind |", "|---|---|---|---|---|---|"]
    for name, a in ATTACKS.items():
        r = m.records.get(name)
        if r is None:
            rows.append(f"| {a.cls} | {name} | {m.backend} | no record | | |")
            continue
        kinds = sorted({f.split(":")[0] for f in r.integrity})
        notes = sorted({f.split(":")[0] for f in r.integrity_notes})
        flag = ("signal " + ", ".join(kinds)) if kinds else ("note " + ", ".join(notes)) if notes else "none"
        rows.append(f"| {a.cls} | {name} | {m.backend} | {r.outcome} | {r.rule} | {flag} |")
    return "\n".join(rows)


def test_every_attack_ends_as_outcome_0_or_a_cheat_signal_never_infra(matrix):
    out = matrix.proc.stdout + matrix.proc.stderr
    print(_table(matrix))
    # 10: valid runs carry cheat signals, more than --gate-max-flagged 0 (no other gate failed)
    assert matrix.proc.returncode == 10, out[-4000:]
    assert sorted(matrix.records) == sorted(ATTACKS), out[-3000:]  # a record for every case...
    lines = (matrix.run / RESULTS).read_bytes().splitlines()
    assert len(lines) == len(ATTACKS)  # ...and one attempt each
    for name, a in ATTACKS.items():
        r = matrix.records[name]
        assert r.attempt == 1 and r.verdict in ("pass", "fail") and not r.rule.startswith("infra"), (name, r)
        assert r.outcome in (0, 1), (name, r)
        if a.group != "honest":
            assert r.outcome == 0 or r.integrity, f"{name}: verdict flipped without a cheat signal: {r}"
        if a.flag is not None and a.group != "honest":
            # the static flag it must get: a signal, or a note where issue 29 made its kind one
            flags = [*r.integrity, *r.integrity_notes]
            assert any(f == a.flag or a.flag.endswith("-") and f.startswith(a.flag) for f in flags), (
                name,
                flags,
            )


# signals from what the final state does under grading (not from how its code is written)
BEHAVIOURAL = (
    "tripwire-passed",
    "tripwire-missing",
    "report-missing",
    "report-channel-disabled",
    "report-channel-mismatch",
    "hardened-regrade-differs",
    "hidden-tests-changed",
)


def test_trust_attacks_end_as_outcome_0_or_a_behavioural_signal(matrix):
    """Issue 29: the runner patch hidden every way, reports rewritten at exit, the channel forged or
    switched off, an exit before any report, hidden tests replaced or shadowed."""
    rows = []
    for name, a in ATTACKS.items():
        if a.group != "trust":
            continue
        r = matrix.records[name]
        behavioural = sorted({s.split(":")[0] for s in r.integrity if s.startswith(BEHAVIOURAL)})
        rows.append(
            f"| {a.cls} | {name} | {matrix.backend} | {r.outcome} | {r.rule} | {', '.join(behavioural)} |"
        )
        assert not r.rule.startswith("infra") and r.attempt == 1, (name, r)
        assert r.outcome == 0 or behavioural, f"{name}: a pass without a behavioural signal: {r}"
    print("\n".join(rows))
    caught = {name for name, a in ATTACKS.items() if a.group == "trust" and matrix.records[name].outcome == 0}
    # the runner patch runs and is caught by the tripwires wherever it hides (ran, then outcome 0)
    for name in (
        "swallow-symlink",
        "swallow-zip",
        "swallow-cookie",
        "swallow-pickle",
        "swallow-timeit",
        "swallow-logging",
        "swallow-doctest",
        "channel-forge",
        "strip-thread",
    ):
        assert name in caught and any(
            s.startswith("tripwire-passed: ") for s in matrix.records[name].integrity
        ), (name, matrix.records[name].integrity)
    for name in ("replace-tests", "shadow-tests", "shadow-package"):
        assert any(s.startswith("tripwire-missing: ") for s in matrix.records[name].integrity), name
    for name in ("replace-tests", "retarget-tests"):  # the file read back after the run is not the one given
        assert name in caught and any(
            s.startswith("hidden-tests-changed: ") for s in matrix.records[name].integrity
        ), (name, matrix.records[name].integrity)
    off = matrix.records["channel-env-off"]
    assert any(s.startswith("report-channel-disabled: ") for s in off.integrity), off.integrity
    assert matrix.records["exit-before-report"].rule == "verifier_agent_caused"


def test_honest_test_infrastructure_ends_with_outcome_1_and_notes_only(matrix):
    for name, a in ATTACKS.items():
        if a.group != "honest":
            continue
        r = matrix.records[name]
        assert (r.outcome, r.verdict, r.rule) == (1, "pass", "verdict"), (name, r)
        assert r.integrity == [], (name, r.integrity)
        assert any(n == a.flag or a.flag.endswith("-") and n.startswith(a.flag) for n in r.integrity_notes), (
            name,
            r.integrity_notes,
        )
    summary = json.loads((matrix.run / "summary.json").read_text())
    rows = summary["tracks"]["demo"]
    # Flagged counts cheat signals only: the honest agents' notes are not counted, every attack's signal is
    assert all(rows[name]["n_flagged"] == 0 for name, a in ATTACKS.items() if a.group == "honest"), rows
    assert all(rows[name]["n_flagged"] == bool(matrix.records[name].integrity) for name in ATTACKS), rows


def test_agent_failures_are_counted_never_infra(matrix):
    r = {name: matrix.records[name] for name in ("report-dir", "logs-bloat", "ends-pid-1")}
    # the verifier fails twice on the agent's state and works on the reference: the agent's failure
    assert (r["report-dir"].rule, r["report-dir"].outcome) == ("verifier_agent_caused", 0), r["report-dir"]
    assert r["logs-bloat"].rule in ("verdict", "verifier_agent_caused") and r["logs-bloat"].outcome == 0
    # docker: its own command died with the container's PID 1, the agent's error; local: the sandbox's
    # init (bwrap, PID 1 of its namespace) ignores signals from inside, the command goes on. Graded either way
    want = "agent_error" if matrix.backend == "docker" else "verdict"
    assert (r["ends-pid-1"].rule, r["ends-pid-1"].outcome) == (want, 0), r["ends-pid-1"]
    assert "+# touched" in (matrix.run / r["ends-pid-1"].artifacts["patch"]).read_text()
    # the grading channels: the extra report and the late rewrite do not count, sub and div are missing
    for name in ("extra-report", "late-writer"):
        rec = matrix.records[name]
        assert (rec.rule, rec.outcome) == ("verdict", 0) and rec.tests[
            "tests.test_new.test_sub"
        ] == "failed", rec


def test_unbounded_final_states_end_within_the_tasks_limits(matrix):
    why = {"many-files": "more than 100000 files", "fifo-in-git": "holds a special file"}
    for name, reason in why.items():
        r = matrix.records[name]
        assert (r.rule, r.outcome) == ("verifier_agent_caused", 0), r
        assert reason in r.verdict_note, r.verdict_note
        # the task's limits (agent 60 s, verifier 60 s) plus 60 s
        print(f"{matrix.backend} {name}: {r.duration_s:.1f} s")
        assert r.duration_s < AGENT_LIMIT + VERIFIER_LIMIT + 60, r.duration_s


def test_hostile_strings_keep_every_line_readable(matrix):
    raw = (matrix.run / RESULTS).read_bytes()
    for line in raw.splitlines():  # every line is UTF-8 and strict JSON
        json.loads(line.decode("utf-8"))
        msgspec.json.decode(line)  # msgspec refuses lone surrogates: none is left
    bad: list[str] = []
    assert len(list(iter_records(matrix.run, bad))) == len(ATTACKS) and bad == []
    for name in ("bad-names", "surrogate-trajectory", "list-trajectory", "number-steps", "deep-trajectory"):
        r = matrix.records[name]
        assert r.rule in ("verdict", "agent_error"), (name, r)
    # the surrogate trajectory is the run's, its strings escaped; the infinite cost is unknown
    hostile = matrix.records["surrogate-trajectory"]
    assert (hostile.rule, hostile.steps, hostile.cost_usd, hostile.prompt_tokens) == ("verdict", 1, None, 5)
    traj = Trajectory.read(matrix.run / hostile.artifacts["trajectory"])
    assert traj.steps[0].message == "lone \\ud800 high, \\xff low"
    assert (
        traj.steps[0].actions[0].command == "echo \\udfff"
        and traj.steps[0].actions[0].output == "out \\ud800"
    )
    from swe_residual.interactions import read_interactions

    (cmd,) = read_interactions(matrix.run / hostile.artifacts["interactions"])
    assert cmd.input == "echo \\udfff"
    # trajectories of the wrong type are not imported: the command's own step stands
    for name in ("list-trajectory", "number-steps"):
        r = matrix.records[name]
        assert (r.rule, r.steps, r.termination) == ("verdict", 1, "submitted"), (name, r)
        assert (
            Trajectory.read(matrix.run / r.artifacts["trajectory"]).steps[0].message == "inline command agent"
        )
    # JSON nested 100,000 deep is refused by the depth-limited reader like any unreadable
    # trajectory: the run keeps the command's own step and is graded (counted), never infra
    deep = matrix.records["deep-trajectory"]
    assert (deep.rule, deep.termination, deep.outcome, deep.steps) == ("verdict", "submitted", 0, 1), deep


def test_the_run_dir_reads_and_gates(matrix):
    summary = json.loads((matrix.run / "summary.json").read_text())
    assert summary["unreadable_lines"] == [] and summary["cases"]["recorded"] == len(ATTACKS)
    assert summary["cases"]["infra_errors"] == [] and summary["gates"]["status"] == 10
    assert 'class="swe-residual-report"' in (matrix.run / "report.html").read_text()
    assert "GATE: demo/bad-names: 1 runs with integrity flags > max 0" in matrix.proc.stdout
    report = cli("report", str(matrix.run))
    assert report.returncode == 0 and "Table 3 - success by track" in report.stdout, report.stderr
    gate = cli("gate", str(matrix.run), "--max-flagged", "0")
    assert gate.returncode == 10, gate.stdout + gate.stderr
    flagged = {name for name, r in matrix.records.items() if r.integrity}
    assert all(f"GATE: demo/{name}: 1 runs with integrity flags > max 0" in gate.stdout for name in flagged)
    # a case page lists a record's notes apart from its signals
    page = next((matrix.run / "pages").glob("honest-fixture-*.html")).read_text()
    assert 'id="integrity-notes"' in page and "test-infrastructure: tests/conftest.py" in page


def test_nothing_is_created_on_the_host(matrix):
    for path, existed in matrix.host_before.items():
        assert existed or not path.exists(), f"{path}: an attack wrote it on the host"
    # no file of any case is left in the harness's scratch (64 GiB sparse files, 3,000-deep trees,
    # 100,001 files, fifos), and no container of the run is left on the engine
    left = subprocess.run(
        ["find", str(matrix.scratch), "!", "-type", "d", "-print"],
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout.split()
    # what stays by design: the suite's own pytest temp link, the docker backend's image facts and
    # lock files (its cache dir; its scratch, swe-residual-docker/work, must be gone)
    kept = [
        f
        for f in left
        if f.endswith("/pytest-current") or any(f"/swe-residual-docker/{d}/" in f for d in ("meta", "locks"))
    ]
    assert sorted(set(left) - set(kept)) == []
    if matrix.backend == "docker":
        from .docker_helpers import left_behind

        assert left_behind(matrix.run.name) == []

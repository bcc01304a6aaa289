"""The plugin's command line: the SWE-Residual options (pytest_addoption) and what is read from
them before a session opens: the run's plan (each track with its states file), whether a track the
command line names has anything to run, and the progress mode."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from swe_residual.progress import on_ci
from swe_residual.registry import BACKENDS
from swe_residual.results import STARTS
from swe_residual.run.plan import Plan, PlanRequest, build_plan
from swe_residual.tracks import fetched_states_file, states_path_for

ROOT = Path(__file__).resolve().parent.parent


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("swe-residual", "SWE-Residual starting-state robustness")
    g.addoption(
        "--agent",
        action="append",
        dest="swe_agents",
        metavar="NAME",
        help="agent to evaluate (repeatable; default: oracle and nop)",
    )
    g.addoption(
        "--start",
        dest="swe_start",
        default="both",
        choices=[*STARTS, "both"],
        help="which starting states to run (default: both)",
    )
    g.addoption(
        "--backend",
        dest="swe_backend",
        default=None,
        choices=BACKENDS,
        help="where states are materialized (default: the track's default_backend in "
        "suites/<track>/track.toml, else local)",
    )
    g.addoption(
        "--states",
        dest="swe_states",
        default=None,
        metavar="PATH",
        help="states manifest (default: the states pack `swe-residual states fetch` installed for "
        "the track, else states.yaml of the project)",
    )
    g.addoption(
        "--run-dir",
        dest="swe_run_dir",
        default=None,
        metavar="DIR",
        help="output directory, must not hold a run yet (default: reports/<timestamp>)",
    )
    g.addoption(
        "--resume",
        dest="swe_resume",
        default=None,
        metavar="RUN_DIR",
        help="continue RUN_DIR: skip cases recorded with a valid verdict, rerun the rest, append",
    )
    g.addoption(
        "--tasks-dir",
        dest="swe_tasks_dir",
        default=None,
        metavar="PATH",
        help="task directories for the selected track (default: suites/<track>/tasks, else the "
        "tasks `swe-residual tasks fetch <track>` put in the cache)",
    )
    g.addoption(
        "--repeat",
        dest="swe_repeat",
        type=int,
        default=1,
        metavar="K",
        help="run every case K times, each on an independent instance (case ids of repeats 2..K end "
        "in #r<k>); tables average a state's repeats first, Table 3 adds pass@k and pass^k (default 1)",
    )
    g.addoption(
        "--agent-timeout",
        dest="swe_agent_timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="override every task's agent wall-time budget",
    )
    g.addoption(
        "--max-case-cost",
        dest="swe_max_case_cost",
        type=float,
        default=None,
        metavar="USD",
        help="stop a model-loop agent (mini-swe-agent, terminus) when its model calls in one case cost "
        "USD: termination cost_limit, outcome 0, the same from both starts (default: the agent "
        "config's max_case_cost, else none)",
    )
    g.addoption(
        "--max-run-cost",
        dest="swe_max_run_cost",
        type=float,
        default=None,
        metavar="USD",
        help="start no further case once the cases this invocation recorded cost USD; the run ends "
        "interrupted (exit 2) with the --resume command that completes it",
    )
    g.addoption(
        "--agent-config",
        action="append",
        dest="swe_agent_configs",
        default=[],
        metavar="PATH",
        help="extra agents.yaml with named agent configs (repeatable)",
    )
    g.addoption(
        "--gate-min-residual",
        dest="swe_gate_min_residual",
        type=float,
        default=None,
        metavar="PCT",
        help="fail (exit 10) when an agent's residual success is below PCT %%",
    )
    g.addoption(
        "--gate-min-clean",
        dest="swe_gate_min_clean",
        type=float,
        default=None,
        metavar="PCT",
        help="fail (exit 10) when an agent's Clean Start success is below PCT %%",
    )
    g.addoption(
        "--gate-max-gap",
        dest="swe_gate_max_gap",
        type=float,
        default=None,
        metavar="PTS",
        help="fail (exit 10) when an agent's Residual Gap exceeds PTS points",
    )
    g.addoption(
        "--gate-baseline",
        dest="swe_gate_baseline",
        default=None,
        metavar="RUN",
        help="compare with a baseline run, its dir or its bundle (.tar.gz of `swe-residual run pack`; "
        "paired test on shared tasks)",
    )
    g.addoption(
        "--gate-max-drop",
        dest="swe_gate_max_drop",
        type=float,
        default=None,
        metavar="PTS",
        help="with --gate-baseline: fail (exit 10) on a drop beyond PTS points that is beyond noise",
    )
    g.addoption(
        "--gate-max-infra",
        dest="swe_gate_max_infra",
        type=float,
        default=None,
        metavar="FRACTION",
        help="invalid run (exit 11) when more than FRACTION of cases have no valid verdict",
    )
    g.addoption(
        "--gate-max-flagged",
        dest="swe_gate_max_flagged",
        type=int,
        default=None,
        metavar="N",
        help="fail (exit 10) when an agent has more than N valid runs with integrity flags",
    )
    g.addoption(
        "--handoff-view",
        action="append",
        dest="swe_handoff_views",
        default=[],
        choices=["summary", "trace"],
        help="also run every residual case with the predecessor's trajectory in the request (a digest, "
        "or the whole trace); reported as its own start (residual+summary, residual+trace), "
        "never mixed with the blind residual start",
    )
    g.addoption(
        "--docker-host",
        action="append",
        dest="swe_docker_hosts",
        default=[],
        metavar="URL",
        help="a Docker engine to run cases on (repeat for several: xdist workers are spread over them "
        "round-robin and fail over when one stops answering; default $SWE_RESIDUAL_DOCKER_HOSTS, "
        "else DOCKER_HOST)",
    )
    g.addoption(
        "--cluster",
        dest="swe_cluster",
        default=os.environ.get("SWE_RESIDUAL_CLUSTER") or None,
        metavar="ADDRESS",
        help="run the cases on the Ray cluster whose head is ADDRESS (HOST:PORT; default "
        "$SWE_RESIDUAL_CLUSTER): this process stays the controller and the one writer of the run dir, "
        "each attempt runs on a node with a free case slot (docs/cluster.md); not with -n",
    )
    g.addoption(
        "--infra-retries",
        dest="swe_infra_retries",
        type=int,
        default=2,
        metavar="N",
        help="rerun a case from a fresh starting state after an infra error, up to N times (default 2)",
    )
    g.addoption(
        "--tables",
        dest="swe_tables",
        default="fit",
        choices=["fit", "wide"],
        help="tables printed at the end: fit (Table 3 and 4 with the columns a reader needs first, within "
        "120 columns; default) or wide (every column, as report.html and tables.md always show)",
    )
    g.addoption(
        "--progress",
        dest="swe_progress",
        default="auto",
        choices=["auto", "live", "plain", "off"],
        help="progress of the run: live (a display redrawn in place: phase, cases done/running/left, ETA, "
        "running success per agent, infra and flag counts, the slowest running case), plain (that "
        "as a line every --progress-interval seconds) or off; auto (default): live on a terminal, "
        "plain when output is not a terminal, under CI (CI set) or with -v, off with -q",
    )
    g.addoption(
        "--progress-interval",
        dest="swe_progress_interval",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="seconds between plain progress lines (default 30)",
    )


def run_plan(suite_dirs: list[Path], opt) -> Plan:
    """The run's plan, each track with its states file (tracks.states_path_for: --states, else its
    fetched pack, else the project's states.yaml); tracks sharing a file are planned together."""
    groups: dict[Path, list[Path]] = {}
    for suite in suite_dirs:
        groups.setdefault(states_path_for(suite.name, opt("swe_states")), []).append(suite)
    plans = [
        build_plan(
            suites,
            PlanRequest(
                agents=opt("swe_agents") or ["oracle", "nop"],
                start=opt("swe_start"),
                states_path=path,
                tasks_dir=opt("swe_tasks_dir"),
                agent_configs=opt("swe_agent_configs"),
                handoff_views=opt("swe_handoff_views"),
                states_explicit=True if opt("swe_states") else None,
                repeat=opt("swe_repeat"),
            ),
        )
        for path, suites in groups.items()
    ]
    if len(plans) == 1:
        return plans[0]
    names = [s.name for s in suite_dirs]
    tracks = {name: t for p in plans for name, t in p.tracks.items()}
    return Plan(
        tracks={n: tracks[n] for n in names},
        states=[s for p in plans for s in p.states],
        cases=[c for n in names for p in plans for c in p.cases_of(n)],
        registry=plans[0].registry,
        notes=[n for p in plans for n in p.notes],
    )


def _named_tracks(args: list[str]) -> list[str]:
    """Tracks the command line names by their own path (suites/deepswe, a file or node in it); a
    track only reached through suites/ as a whole is not named."""
    root = (ROOT / "suites").resolve()
    named: dict[str, None] = {}
    for arg in args:
        p = Path(arg.split("::")[0]).resolve()
        if root in p.parents:
            named[p.relative_to(root).parts[0]] = None
    return list(named)


def check_gate_baseline(baseline: str | None) -> None:
    """--gate-baseline is read at the end of the run: a wrong path is said before any case."""
    from swe_residual.report.bundle import is_bundle

    if baseline and not is_bundle(baseline) and not (Path(baseline) / "results.jsonl").is_file():
        raise pytest.UsageError(
            f"--gate-baseline {baseline}: no results.jsonl there (not a run dir) and not a run bundle "
            "(.tar.gz of `swe-residual run pack`); pass the baseline run's dir or its bundle"
        )


def check_something_to_run(config: pytest.Config, plan: Plan) -> None:
    """A track named on the command line with no cases (no tasks, or no states) is a usage error
    (exit 4) before any worker starts, naming the commands that get what is missing: a run that
    ran nothing must not pass. Reached only through suites/, such a track is skipped with the reason."""
    for name in _named_tracks(config.args):
        track = plan.tracks.get(name)
        if track is None or plan.cases_of(name):
            continue
        reason = track.skip_reason or f"no cases for track {name!r}"
        fetch = (
            f"`swe-residual states fetch SOURCE --track {name}` installs a states pack someone shared "
            "(a dir, a .tar.gz, its URL or a git URL)"
        )
        if track.tasks_dir is None:
            more = "" if fetched_states_file(name) else f"; for its states, {fetch}"
        else:  # a states reason names the pack and the residualize path itself
            more = "" if track.skip_reason else f"; or {fetch}"
        raise pytest.UsageError(f"suites/{name} has nothing to run: {reason}{more}")


def progress_mode(config: pytest.Config) -> str:
    """--progress auto: live on a terminal at the default verbosity; plain lines when the output is
    not a terminal, under CI or with -v (pytest prints a line per case there); off with -q."""
    mode = config.getoption("swe_progress")
    if mode != "auto":
        return mode
    verbose = config.option.verbose
    if verbose < 0 or config.getoption("collectonly"):
        return "off"
    tty = getattr(sys.stdout, "isatty", lambda: False)()
    return "live" if tty and not on_ci() and verbose == 0 else "plain"

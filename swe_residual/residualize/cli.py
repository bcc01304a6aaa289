"""`swe-residual residualize ...`: the Stage I-IV subcommands over one work dir."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from swe_residual.registry import BACKENDS

if (
    TYPE_CHECKING
):  # imported by the commands that use it: `swe-residual --help` and the other commands stay light
    from swe_residual.residualize.workdir import WorkDir


def _workdir(path: str, create: bool = False) -> WorkDir:
    from swe_residual.residualize.workdir import WorkDir

    return WorkDir(path, create=create)


USAGE = "2 usage error (one line `error: ...` naming the option, file or field)"


def _exits(*codes: str) -> str:
    return "exit status: " + "; ".join([*codes, USAGE])


def _tasks_options(p: argparse.ArgumentParser, track_required: bool = False) -> None:
    p.add_argument(
        "--track",
        required=track_required,
        default=None,
        help="the track of the tasks" + ("" if track_required else " (default: every track in the work dir)"),
    )
    p.add_argument(
        "--tasks-dir",
        default=None,
        metavar="PATH",
        help="the track's tasks (remembered in the work dir after the first use)",
    )


def _backend_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--backend",
        default=None,
        choices=BACKENDS,
        help="where cases run (default: the track's default backend)",
    )


def cmd_run(args: argparse.Namespace) -> int:
    from swe_residual.residualize.stage1 import run_predecessors

    return run_predecessors(_workdir(args.workdir, create=True), args)


def cmd_import(args: argparse.Namespace) -> int:
    if args.format == "tb-leaderboard":
        from swe_residual.residualize.leaderboard import import_leaderboard_command

        return import_leaderboard_command(_workdir(args.workdir, create=True), args)
    if args.format == "deepswe-release":
        from swe_residual.residualize.release import import_release_command

        return import_release_command(_workdir(args.workdir, create=True), args)
    from swe_residual.residualize.importers import import_command

    return import_command(_workdir(args.workdir, create=True), args)


def cmd_filter(args: argparse.Namespace) -> int:
    from swe_residual.residualize.filter import filter_command

    return filter_command(_workdir(args.workdir), args)


def cmd_review(args: argparse.Namespace) -> int:
    return review_command(_workdir(args.workdir), args)


def cmd_build(args: argparse.Namespace) -> int:
    from swe_residual.residualize.build import build_command

    return build_command(_workdir(args.workdir), args)


def cmd_status(args: argparse.Namespace) -> int:
    from swe_residual.residualize.status import status_command

    return status_command(_workdir(args.workdir), args)


def add_parser(sub: argparse._SubParsersAction) -> None:
    r = sub.add_parser(
        "residualize",
        help="build Residual States from predecessor runs (Stages I-IV)",
        description=__doc__ + " Stage by stage: run or import, filter, review, build; status "
        "counts what each stage kept and dropped (docs/residualization.md).",
        epilog="exit status: per subcommand (see its --help)",
    )
    rsub = r.add_subparsers(dest="residualize_command", required=True)

    about = "Stage I: run a predecessor agent on every task from the clean state"
    run = rsub.add_parser(
        "run",
        help=about,
        description=about + "; running it again resumes (recorded runs are skipped)",
        epilog=_exits("0 every run recorded", "1 some runs not recorded (infra errors; run it again)"),
    )
    _tasks_options(run, track_required=True)
    _backend_option(run)
    run.add_argument(
        "--predecessor",
        required=True,
        metavar="AGENT",
        help="any agent --agent accepts "
        "(`swe-residual agents` lists them; model agents need the `agents` extra)",
    )
    run.add_argument(
        "--model-family",
        default=None,
        help="recorded as the predecessor's model family (default: from the agent's model, else the harness)",
    )
    run.add_argument("--attempts", type=int, default=1, help="runs per task (default 1)")
    run.add_argument(
        "--agent-timeout",
        type=float,
        default=None,
        metavar="S",
        help="the predecessor's wall-time budget per run (default: the task's [agent] timeout_sec)",
    )
    run.add_argument(
        "--agent-config",
        action="append",
        default=[],
        metavar="PATH",
        help="extra agents.yaml with named agent configs (repeatable)",
    )
    run.add_argument("--task", action="append", default=[], metavar="ID", help="only these tasks")
    run.add_argument("-j", "--jobs", type=int, default=2, help="runs at once (default 2)")
    run.add_argument("workdir", metavar="WORKDIR", help="the work dir (created if missing)")
    run.set_defaults(func=cmd_run)

    about = (
        "Stage I from real runs: Harbor/Pier trials or jobs, SWE-bench predictions + reports, mini-swe-agent "
        "trajectories, DeepSWE's public leaderboard release, Terminal-Bench 2's leaderboard trials"
    )
    imp = rsub.add_parser(
        "import",
        help=about,
        description=about + "; importing again adds nothing twice",
        epilog=_exits(
            "0 every source imported",
            "1 some source could not be read (one FAILED line each), or trials of the "
            "release were refused or left incomplete",
        ),
    )
    imp.add_argument(
        "--format",
        required=True,
        choices=[
            "harbor",
            "swe-bench",
            "mini-swe-agent",
            "terminal-bench-1",
            "deepswe-release",
            "tb-leaderboard",
        ],
        help="what the SOURCEs are",
    )
    _tasks_options(imp, track_required=True)
    imp.add_argument(
        "--model-family",
        default=None,
        help="recorded as the model family of every run imported "
        "(default: from the model the source names; required when it names none)",
    )
    rel = imp.add_argument_group(
        "--format deepswe-release (no SOURCE) and tb-leaderboard (one SOURCE: a dir, an http(s) "
        "dataset URL or a git URL of the leaderboard's submissions)"
    )
    rel.add_argument(
        "--release",
        default=None,
        metavar="URL|DIR",
        help="the release manifest (URL, file:///..., a path) or a local mirror dir "
        "(default: https://deepswe.datacurve.ai/artifacts/v1.1/release.json)",
    )
    rel.add_argument(
        "--agent",
        action="append",
        default=[],
        metavar="A",
        help="tb-leaderboard: only trials of these agents (config.json agent.name, e.g. terminus-2)",
    )
    rel.add_argument("--model", action="append", default=[], metavar="M", help="only trials of these models")
    rel.add_argument(
        "--config", action="append", default=[], metavar="C", help="only trials of these configs"
    )
    rel.add_argument("--task", action="append", default=[], metavar="T", help="only trials of these tasks")
    rel.add_argument("--limit", type=int, default=None, metavar="N", help="at most N trials (in index order)")
    rel.add_argument("-j", "--jobs", type=int, default=8, help="concurrent downloads and reads (default 8)")
    rel.add_argument(
        "--family-map",
        default=None,
        metavar="PATH",
        help="YAML/JSON {model-name prefix: family} overriding the built-in table",
    )
    rel.add_argument("-v", "--verbose", action="store_true", help="one line per imported run")
    imp.add_argument(
        "sources",
        nargs="*",
        metavar="SOURCE",
        help="job, trial, prediction or trajectory files and dirs (none with --format deepswe-release)",
    )
    imp.add_argument("workdir", metavar="WORKDIR", help="the work dir (created if missing)")
    imp.set_defaults(func=cmd_import)

    about = "Stage II: keep declared-complete, validly failing, changed, unique runs"
    flt = rsub.add_parser(
        "filter",
        help=about,
        description=about + "; every dropped run is counted with its reason",
        epilog=_exits("0"),
    )
    flt.add_argument(
        "--ignore",
        action="append",
        default=[],
        metavar="GLOB",
        help="more incidental-artifact globs (added to the defaults)",
    )
    flt.add_argument("--no-default-ignores", action="store_true", help="drop the default incidental globs")
    flt.add_argument(
        "--per-task",
        type=int,
        default=None,
        metavar="N",
        help="then keep at most N candidates per task, preferring distinct model families; the "
        "rest become not_selected",
    )
    flt.add_argument(
        "--families",
        action="append",
        default=None,
        metavar="F[,F...]",
        help="select candidates of these model families only, in this order of preference "
        "(repeat the option or separate with commas)",
    )
    flt.add_argument("--seed", type=int, default=0, help="the selection's order within and across families")
    flt.add_argument("workdir", metavar="WORKDIR", help="the work dir of Stage I")
    flt.set_defaults(func=cmd_filter)

    about = "Stage III: review packets, the review page, recorded decisions"
    rev = rsub.add_parser(
        "review",
        help=about,
        description=about + " (two reviewers per candidate)",
        epilog=_exits(
            "0",
            "1 some packets could not be written (a summary model failing), or "
            "imported decisions were refused (one line each)",
        ),
    )
    _tasks_options(rev)
    rev.add_argument("--serve", action="store_true", help="start the local review page")
    rev.add_argument(
        "--host", default="127.0.0.1", help="--serve: the address to listen on (default 127.0.0.1)"
    )
    rev.add_argument("--port", type=int, default=8765, help="--serve: the port (default 8765)")
    rev.add_argument(
        "--summary-model",
        default=None,
        metavar="MODEL",
        help="LiteLLM model that summarizes trajectories (default: a deterministic digest)",
    )
    rev.add_argument(
        "--reviewer",
        default=None,
        metavar="NAME",
        help="who decides (a decision needs --reviewer, --candidate, --task-directed and --consistent; "
        "with --serve: the page opens signed in as NAME)",
    )
    rev.add_argument("--candidate", default=None, metavar="ID", help="the candidate decided on")
    rev.add_argument(
        "--task-directed",
        choices=["yes", "no"],
        default=None,
        help="criterion (a): the predecessor's changes are directed at the task (no unrelated "
        "or incidental changes)",
    )
    rev.add_argument(
        "--consistent",
        choices=["yes", "no"],
        default=None,
        help="criterion (b): task-verifier consistent (the request and the hidden tests agree "
        "on what completion is)",
    )
    rev.add_argument("--comment", default="", help="a note kept with the decision")
    rev.add_argument(
        "-j", "--jobs", type=int, default=4, help="packets made at once (model summaries; default 4)"
    )
    share = rev.add_mutually_exclusive_group()
    share.add_argument(
        "--export-decisions",
        default=None,
        metavar="FILE",
        help="write the decisions recorded here as JSONL (only --reviewer's when given)",
    )
    share.add_argument(
        "--import-decisions",
        default=None,
        metavar="FILE",
        help="add the decisions of a file another machine exported",
    )
    rev.add_argument("workdir", metavar="WORKDIR", help="the work dir of Stages I-II")
    rev.set_defaults(func=cmd_review)

    about = "Stage IV: rebuild kept candidates, validate, write states"
    bld = rsub.add_parser(
        "build",
        help=about,
        description=about + "; every outcome (also a failed rebuild) is "
        "recorded, so running it again resumes",
        epilog=_exits("0"),
    )
    _tasks_options(bld)
    _backend_option(bld)
    bld.add_argument(
        "--states",
        default=None,
        metavar="PATH",
        help="states file to add the states to (default "
        "WORKDIR/states/states.yaml; created if missing, only ever appended to; patches go to states/ "
        "beside it)",
    )
    bld.add_argument("-j", "--jobs", type=int, default=2, help="candidates validated at once (default 2)")
    bld.add_argument(
        "--volatile",
        action="append",
        default=[],
        metavar="GLOB",
        help="machine states: a path whose content changes by itself, e.g. a daemon's log "
        "(/var/log/app/*); left out of the two replays' comparison and recorded in each state "
        "(repeat the option)",
    )
    bld.add_argument("workdir", metavar="WORKDIR", help="the work dir of Stages I-III")
    bld.set_defaults(func=cmd_build)

    about = "counts per stage and reason"
    st = rsub.add_parser(
        "status", help=about, description=about + " (also written to construction.jsonl)", epilog=_exits("0")
    )
    st.add_argument("--format", choices=["text", "json"], default="text", help="output format (default text)")
    st.add_argument("workdir", metavar="WORKDIR", help="the work dir")
    st.set_defaults(func=cmd_status)


DECISION_FLAGS = (
    ("reviewer", "--reviewer"),
    ("candidate", "--candidate"),
    ("task_directed", "--task-directed"),
    ("consistent", "--consistent"),
)


def review_command(wd: WorkDir, args: argparse.Namespace) -> int:
    """`review`: record one decision, or write the packets and list what is pending (or serve the page)."""
    from swe_residual.errors import InputError
    from swe_residual.residualize.review import (
        REVIEWERS,
        agreement,
        counted_reviews,
        format_agreement,
        record_review,
        review_outcomes,
        write_packets,
        yes_no,
    )

    if args.export_decisions or args.import_decisions:
        return share_decisions(wd, args)
    given = [flag for attr, flag in DECISION_FLAGS if getattr(args, attr) is not None]
    if args.serve and given == ["--reviewer"] and not args.comment:
        given = []  # --serve --reviewer NAME: the page opens signed in as NAME
    if given or args.comment:
        missing = [flag for attr, flag in DECISION_FLAGS if getattr(args, attr) is None]
        if missing:
            raise InputError(
                f"review: {', '.join(f for _, f in DECISION_FLAGS)} are needed together "
                f"(missing {', '.join(missing)})"
            )
        if args.serve:
            raise InputError("review: --serve records decisions on the page; drop the decision flags")
        r = record_review(
            wd,
            args.candidate,
            args.reviewer,
            args.task_directed == "yes",
            args.consistent == "yes",
            args.comment,
        )
        n = len(counted_reviews(wd).get(r.candidate, []))
        print(
            f"recorded: {r.reviewer} on {r.candidate}: task-directed {yes_no(r.task_directed)}, "
            f"consistent {yes_no(r.consistent)} ({'keep' if r.keep else 'reject'}); "
            f"candidate {r.candidate}: {review_outcomes(wd)[r.candidate]} ({n} of {REVIEWERS} reviews)"
        )
        return 0
    cands, status = write_packets(wd, args)
    if args.serve:
        from swe_residual.residualize.review_page import serve

        return serve(wd, args.host, args.port, reviewer=args.reviewer) or status
    outcomes, counted = review_outcomes(wd), counted_reviews(wd)
    counts = {k: sum(1 for c in cands if outcomes[c.id] == k) for k in ("pending", "kept", "rejected")}
    print(
        f"candidates: {len(cands)} (pending {counts['pending']}, kept {counts['kept']}, "
        f"rejected {counts['rejected']})"
    )
    for c in cands:
        if outcomes[c.id] == "pending":
            who = [r.reviewer for r in counted.get(c.id, [])]
            print(f"  pending {c.id} ({c.track}/{c.task}): reviewed by {', '.join(who) or 'nobody yet'}")
    ag = agreement(wd)
    if ag["candidates"]:
        print("\n".join(format_agreement(ag)))
    return status


def share_decisions(wd: WorkDir, args: argparse.Namespace) -> int:
    """`review --export-decisions FILE [--reviewer NAME]` / `--import-decisions FILE`."""
    from swe_residual.errors import InputError
    from swe_residual.residualize.review import (
        agreement,
        export_decisions,
        format_agreement,
        import_decisions,
    )

    flag = "--export-decisions" if args.export_decisions else "--import-decisions"
    extra = [
        f
        for attr, f in DECISION_FLAGS
        if getattr(args, attr) is not None and not (attr == "reviewer" and args.export_decisions)
    ]
    extra += ["--comment"] * bool(args.comment) + ["--serve"] * bool(args.serve)
    if extra:
        raise InputError(
            f"review {flag}: drop {', '.join(extra)}"
            + (" (only --reviewer goes with --export-decisions)" if args.export_decisions else "")
        )
    if args.export_decisions:
        n = export_decisions(wd, args.export_decisions, args.reviewer)
        print(
            f"exported {n} decisions"
            + (f" of {args.reviewer}" if args.reviewer else "")
            + f" to {args.export_decisions}"
        )
        return 0
    counts, refused = import_decisions(wd, args.import_decisions)
    for line in refused:
        print(line)
    print(
        f"decisions from {args.import_decisions}: {counts['imported']} imported, {counts['already']} already "
        f"here, {counts['refused']} refused"
    )
    ag = agreement(wd)
    if ag["candidates"]:
        print("\n".join(format_agreement(ag)))
    return 1 if refused else 0

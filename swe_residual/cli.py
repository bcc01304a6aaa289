"""The `swe-residual` command line: validate states, list agents, export schemas, fetch tasks,
pack and fetch states, build images. Runs themselves are pytest runs (`pytest suites/<track>`)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from swe_residual.errors import InputError
from swe_residual.registry import BACKENDS

ROOT = Path(__file__).resolve().parent.parent


def states_track(path: Path) -> str:
    """`validate` without --track: the one track the states file holds (demo for the project's
    own file or an empty one); InputError when it holds several."""
    from swe_residual.safe_read import read_yaml

    raw = read_yaml(path, "states file") if path.is_file() else None
    entries = raw.get("states") if isinstance(raw, dict) else None
    tracks = sorted(
        {e["track"] for e in entries or [] if isinstance(e, dict) and isinstance(e.get("track"), str)}
    )
    if len(tracks) > 1:
        raise InputError(
            f"--states {path}: holds states of tracks {', '.join(tracks)}; name one with --track"
        )
    return tracks[0] if tracks else "demo"


def cmd_validate(args: argparse.Namespace) -> int:
    from swe_residual.run.plan import PlanRequest, build_plan, check_backend, default_backend
    from swe_residual.run.session import RunSession, SessionOptions
    from swe_residual.run.validate import validate_track
    from swe_residual.tracks import suite_dir

    args.track = args.track or states_track(Path(args.states))
    suite = suite_dir(args.track)
    plan = build_plan(
        [suite],
        PlanRequest(
            agents=["oracle", "nop"], start="both", states_path=Path(args.states), tasks_dir=args.tasks_dir
        ),
    )
    track = plan.tracks[args.track]
    if track.skip_reason and track.tasks and not plan.states:  # the suite's reason names pytest options
        raise InputError(
            f"--states {args.states}: no states of track {args.track!r} to validate (of its tasks"
            f"{' in --tasks-dir' if args.tasks_dir else ''}); pass --track TRACK or --states FILE"
        )
    if track.skip_reason:
        raise InputError(track.skip_reason)
    for note in plan.notes:
        print(f"note: {note}")
    backend = args.backend or default_backend(args.track)
    check_backend(plan, backend)
    run_dir = Path(args.run_dir or tempfile.mkdtemp(prefix="swe-residual-validate-")) / "validate"
    session = RunSession.open(
        plan, run_dir, SessionOptions(backend=backend, infra_retries=1, run_id=f"validate-{int(time.time())}")
    )
    print(
        f"validating {len(plan.states)} states of {len(track.tasks)} tasks on the {backend} backend "
        f"(runs: {run_dir})"
    )
    try:
        checks = validate_track(session, jobs=args.jobs)
    finally:
        session.close()
    bad = [c for c in checks if not c.ok]
    print(f"{len(checks) - len(bad)}/{len(checks)} states valid")
    return 1 if bad else 0


def cmd_agents(args: argparse.Namespace) -> int:
    import textwrap

    from swe_residual.agents import AgentRegistry

    infos = AgentRegistry([Path(p) for p in args.agent_config]).describe()
    if args.format == "json":
        print(
            json.dumps(
                [
                    {
                        "name": i.name,
                        "harness": i.harness,
                        "description": i.description,
                        "needs": i.needs,
                        "ready": i.ready,
                        "problems": i.problems,
                    }
                    for i in infos
                ],
                indent=1,
            )
        )
        return 0
    print(
        "agents for `pytest suites/<track> --agent NAME` (more with --agent-config FILE, in agents.yaml's format):"
    )
    for i in infos:
        state = "ready" if i.ready else "not ready: " + "; ".join(i.problems)
        print(f"\n{i.name}  [{i.harness}]  {state}")
        for line in textwrap.wrap(i.description, 100):
            print(f"    {line}")
        if i.needs:
            print(f"    needs: {', '.join(i.needs)}")
    return 0


def cmd_schema(args: argparse.Namespace) -> int:
    from swe_residual.states import json_schema

    print(json.dumps(json_schema(), indent=2))
    return 0


def cmd_images(args: argparse.Namespace) -> int:
    from swe_residual.backends.docker.bootstrap import (
        base_images_of,
        bootstrap_base_images,
        ensure_docker_daemon,
    )

    started = ensure_docker_daemon()
    if started is not None:
        print(f"no Docker engine answered: started dockerd (pid {started}, log /var/log/dockerd.log)")
    dockerfiles: list[Path] = []
    # only the tasks bundled in suites/<track>/tasks: fetched tasks (DeepSWE) name real upstream
    # images (golang:..., node:...) that a debootstrap rootfs must never stand in for
    for suite in sorted(p for p in (ROOT / "suites").iterdir() if p.is_dir()):
        tdir = suite / "tasks"
        if tdir.is_dir():
            dockerfiles += sorted(tdir.glob("*/environment/Dockerfile")) + sorted(
                tdir.glob("*/tests/Dockerfile")
            )
    names = base_images_of(dockerfiles)
    built = bootstrap_base_images(names)
    print(f"base images: {', '.join(names) or 'none'}; built now: {', '.join(built) or 'none (all present)'}")
    return 0


def _image_caches(args: argparse.Namespace):
    from swe_residual.backends.docker.caches import EngineView, list_entries
    from swe_residual.backends.docker.engine import default_cache_dir

    cache = Path(args.cache_dir) if args.cache_dir else default_cache_dir()
    engine = EngineView(tasks=args.task)
    return cache, engine, list_entries(cache, engine, [Path(d) for d in args.run_dir])


def cmd_images_list(args: argparse.Namespace) -> int:
    from swe_residual.backends.docker.caches import age_text, as_json

    cache, engine, entries = _image_caches(args)
    engine.close()
    if args.format == "json":
        print(
            json.dumps(
                {"cache_dir": str(cache), "engine": engine.problem or "ok", "entries": as_json(entries)},
                indent=1,
            )
        )
        return 0
    if engine.problem:
        print(
            f"no Docker engine answers ({engine.problem}): whether images still exist is unknown",
            file=sys.stderr,
        )
    print(f"cache: {cache} ({len(entries)} entries, {sum(e.stale for e in entries)} stale)")
    for e in entries:
        print(
            f"{e.state:<10} {e.kind:<14} {age_text(e.age_s):>5}  {e.describes}"
            f"{'  - ' + e.detail if e.detail else ''}  [{e.path}]"
        )
    return 0


def cmd_images_prune(args: argparse.Namespace) -> int:
    from swe_residual.backends.docker.caches import prune

    cache, engine, entries = _image_caches(args)
    try:
        if engine.problem and not args.all:
            raise InputError(
                f"images prune: no Docker engine answers ({engine.problem}): which cached entries "
                "describe images that are gone cannot be told; start the engine, or pass --all"
            )
        removed, failed = prune(entries, engine, everything=args.all, dry_run=args.dry_run)
    finally:
        engine.close()
    verb = "would remove" if args.dry_run else "removed"
    for e in removed:
        print(f"{verb}: {e.kind} {e.describes} ({e.state}) [{e.path}]")
    for e, why in failed:
        print(f"not removed: {e.kind} {e.describes} [{e.path}]: {why}", file=sys.stderr)
    kept = len(entries) - len(removed) - len(failed)
    print(
        f"{verb} {len(removed)} of {len(entries)} entries in {cache}, kept {kept}"
        + (f", {len(failed)} could not be removed" if failed else "")
    )
    return 1 if failed else 0


def cmd_tasks_fetch(args: argparse.Namespace) -> int:
    from swe_residual.tracks import (
        ALIASES,
        clone_dir,
        fetch_tasks,
        load_track_config,
        suite_dir,
        tasks_dir_for,
    )

    suite = suite_dir(ALIASES.get(args.track, args.track), f"tasks fetch {args.track}")
    cfg = load_track_config(suite)
    res = fetch_tasks(cfg, ref=args.ref, dest=args.dest, url=args.url, version=args.version)
    at = f"{f'version {res.version}, ' if res.version else ''}{res.ref or 'default branch'} = commit {res.commit}"
    if res.previous is None:
        print(f"{res.track}: cloned {res.url} ({at}) into {res.clone}")
    elif res.previous == res.commit:
        print(f"{res.track}: {res.clone} is up to date with {res.url} ({at})")
    else:
        print(
            f"{res.track}: updated {res.clone} from {res.url}: {res.previous} -> {res.commit} ({res.ref or 'default branch'})"
        )
    print(f"{res.n_tasks} task dirs in {res.tasks_dir}")
    if res.digests is None:
        print("no dataset.toml in the repository: task digests not checked")
    else:
        d = res.digests
        print(f"{len(d.matched)} task dirs match the digests of {d.manifest}")
        if d.missing:
            print(f"listed in {d.manifest.name} but not in the repository: {', '.join(d.missing[:20])}")
        if d.unlisted:
            print(
                f"task dirs {d.manifest.name} does not list (no digest checked): {', '.join(d.unlisted[:20])}"
            )
    failed = _prepare_images(res.tasks_dir, res.track) if args.images else 0
    found = tasks_dir_for(suite, None)
    if found is not None and found.resolve() == res.tasks_dir.resolve():
        print(f"runs find them without --tasks-dir: pytest suites/{res.track} ...")
    elif found is not None:
        print(f"runs of track {res.track} use {found} unless you pass --tasks-dir {res.tasks_dir}")
    else:
        print(f"not where the track looks ({clone_dir(res.track)}): pass --tasks-dir {res.tasks_dir}")
    return 1 if failed else 0


def _prepare_images(tasks_dir: Path, track: str) -> int:
    """Every fetched task's clean image, as a run would get it (its [environment] docker_image
    pulled when a registry answers, else environment/ built): one line per task, saying why for a
    task that cannot be prepared. Returns how many could not."""
    from swe_residual.backends.docker.backend import DockerBackend
    from swe_residual.errors import HarnessError
    from swe_residual.tasks import load_task

    backend = DockerBackend(run_id=f"tasks-fetch-{os.getpid()}")
    failed = 0
    try:
        for child in sorted(p for p in tasks_dir.iterdir() if (p / "task.toml").is_file()):
            started = time.monotonic()
            try:
                task = load_task(child, track)
                info = backend.images.clean(task)
            except (InputError, HarnessError) as exc:
                failed += 1
                print(f"image of {child.name}: cannot be prepared: {' '.join(str(exc).split())[:300]}")
                continue
            public = task.config.environment.docker_image
            how = (
                f"the published image {public}"
                if public and info.ref == public
                else f"built from environment/ ({info.ref})"
            )
            print(f"image of {task.id}: {how}, {time.monotonic() - started:.1f} s")
    finally:
        backend.close()
    return failed


def not_a_run_dir(path: Path) -> str:
    """Why `path` is not a run dir; for a dir of run dirs (reports/), the ones it holds, newest last."""
    why = f"{path}: no results.jsonl (not a run dir)"
    try:
        runs = sorted(
            (d for d in path.iterdir() if (d / "results.jsonl").is_file()),
            key=lambda d: ((d / "results.jsonl").stat().st_mtime, d.name),
        )
    except OSError:
        return why
    if not runs:
        return why
    shown = ", ".join(d.name for d in runs[-10:])
    more = f"{len(runs) - 10} older and " if len(runs) > 10 else ""
    return f"{why}; it holds {len(runs)} run dirs ({more}{shown}, newest last): pass one, e.g. {runs[-1]}"


def cmd_report(args: argparse.Namespace) -> int:
    from swe_residual.report.bundle import is_bundle, opened

    if args.html and not args.html_dir and any(is_bundle(d) for d in args.run_dirs):
        raise InputError(
            "--html: a run bundle (.tar.gz) is read, not written: pass --html-dir DIR for its pages"
        )
    with opened(args.run_dirs) as run_dirs:  # a bundle: extracted safely into a temporary dir
        return _report(argparse.Namespace(**{**vars(args), "run_dirs": run_dirs}))


def _report(args: argparse.Namespace) -> int:
    from swe_residual.report.tables import (
        build_report,
        load_construction,
        load_construction_file,
        load_runs,
        render_csv,
        render_markdown,
        render_text,
    )

    for d in args.run_dirs:
        if not (Path(d) / "results.jsonl").is_file():
            raise InputError(not_a_run_dir(Path(d)))
    records, manifest = load_runs(args.run_dirs, rows=bool(args.html or args.html_dir))  # rows: the pages
    construction = load_construction(args.run_dirs)
    for path in args.construction:
        construction += load_construction_file(Path(path))
    report = build_report(
        records, manifest, construction=construction or None, n_boot=args.n_boot, seed=args.seed
    )
    report["unreadable_lines"] = list(records.bad_lines)  # left out of every number above
    if args.html or args.html_dir:
        from swe_residual.report.html.run_page import write_browser

        if not args.html_dir and len(args.run_dirs) > 1:
            raise InputError("--html: several run dirs: pass --html-dir DIR for the merged pages")
        out = Path(args.html_dir or args.run_dirs[0])
        written = write_browser(out, report, records, manifest, [Path(d) for d in args.run_dirs])
        print(
            f"report:  {written.run_page.resolve()} ({written.n_pages} case pages in "
            f"{written.pages_dir.resolve()}, {written.seconds:.1f} s)",
            file=sys.stderr,
        )
    if args.format == "json":
        print(json.dumps(report, indent=1, sort_keys=True))
    elif args.format == "md":
        print(render_markdown(report))
    elif args.format == "csv":
        print(render_csv(report), end="")
    else:
        print(render_text(report))
    if records.bad_lines:  # the tables stand without these lines, but the run is invalid
        from swe_residual.report.gates import EXIT_INVALID

        more = f" (+{len(records.bad_lines) - 1} more)" if len(records.bad_lines) > 1 else ""
        print(
            f"INVALID RUN (exit {EXIT_INVALID}): unreadable results line, not counted: {records.bad_lines[0]}{more}",
            file=sys.stderr,
        )
        return EXIT_INVALID
    return 0


def cmd_gate(args: argparse.Namespace) -> int:
    from swe_residual.report.bundle import is_bundle, opened

    given = [*args.run_dirs, *([args.baseline] if args.baseline else [])]
    with opened(given) as dirs:  # a bundle: extracted safely into a temporary dir
        run_dirs, baseline = dirs[: len(args.run_dirs)], (dirs[-1] if args.baseline else None)
        if args.baseline and not args.html_dir and is_bundle(args.run_dirs[0]):
            print(
                "note: no compare.html: the run is a bundle (read, not written); pass --html-dir D",
                file=sys.stderr,
            )
            args.no_page = True
        return _gate(argparse.Namespace(**{**vars(args), "run_dirs": run_dirs, "baseline": baseline}))


def _gate(args: argparse.Namespace) -> int:
    from swe_residual.report.gates import GateConfig, check_gates
    from swe_residual.report.tables import load_runs

    for d in [*args.run_dirs, *([args.baseline] if args.baseline else [])]:
        if not (Path(d) / "results.jsonl").is_file():
            raise InputError(not_a_run_dir(Path(d)))
    cfg = GateConfig(
        min_residual=args.min_residual,
        min_clean=args.min_clean,
        max_gap=args.max_gap,
        max_drop=args.max_drop,
        max_infra_fraction=args.max_infra,
        max_flagged=args.max_flagged,
    )
    # each run dir decoded once (columns and rows): the gates and the page read the same numbers
    records, manifest = load_runs(args.run_dirs, rows=True)
    baseline = load_runs([args.baseline], rows=True)[0] if args.baseline else None
    result = check_gates(records, manifest, cfg, baseline)
    if args.baseline:  # what made the two runs (provenance.json): a changed task or agent config is said
        from swe_residual.report.provenance import run_differences

        result.warnings = run_differences(args.baseline, args.run_dirs[0])
    from swe_residual.report.gates import check_lines

    print("\n".join(check_lines(result)))  # every check with its numbers, then the verdict
    # the same page as `swe-residual compare BASELINE RUN`; the verdict stands without it
    if baseline is not None and not getattr(args, "no_page", False):
        from swe_residual.report.compare import compare_runs, page_for

        try:
            page_for(
                compare_runs(baseline, records),
                [args.baseline],
                args.run_dirs,
                args.html_dir or args.run_dirs[0],
            )
        except InputError as exc:
            print(f"warning: no comparison page: {exc}", file=sys.stderr)
    return result.status


def cmd_regrade(args: argparse.Namespace) -> int:
    """Grade a recorded run's final states again into a new run dir; the original is only read."""
    from swe_residual.report.bundle import is_bundle, opened
    from swe_residual.run.regrade_recorded import regrade_run

    src = Path(args.run)
    if args.out:
        out = Path(args.out)
    else:
        stem = src.name.removesuffix(".tar.gz").removesuffix(".tgz") if is_bundle(src) else src.resolve().name
        out = src.resolve().parent / f"{stem}-regrade-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}"
    with opened([args.run]) as (run_dir,):
        if not is_bundle(src) and not (src / "results.jsonl").is_file():
            raise InputError(not_a_run_dir(src))
        result = regrade_run(Path(run_dir), out, tasks_dir=args.tasks_dir, backend=args.backend)
    n, moved = len(result.regraded), len(result.moved)
    print(
        f"regrade: {n} of {len(result.outcomes)} case(s) re-graded, {moved} moved, "
        f"{len(result.outcomes) - n} not re-gradable; no agent ran"
    )
    print(f"run:     {result.out}")
    print(f"compare: swe-residual compare {args.run} {result.out}")
    return 0


def cmd_run_pack(args: argparse.Namespace) -> int:
    """A run dir as one relocatable .tar.gz."""
    from swe_residual.report.bundle import pack_run

    run = Path(args.run)
    if not (run / "results.jsonl").is_file():
        raise InputError(not_a_run_dir(run))
    files, size = pack_run(run, Path(args.out))
    print(f"bundle: {Path(args.out).resolve()} ({files} files, {size} bytes before compression)")
    return 0


def cmd_export_harbor(args: argparse.Namespace) -> int:
    from swe_residual.harbor.export import export_track

    out = Path(args.out)
    exported = export_track(
        args.track, out, states_path=Path(args.states), tasks_dir=args.tasks_dir, start=args.start
    )
    n_res = sum(e.start == "residual" for e in exported)
    print(
        f"{args.track}: exported {len(exported)} Harbor task dirs ({len(exported) - n_res} clean, {n_res} residual) "
        f"into {out}; index: {out / 'export.json'}"
    )
    return 0


def cmd_import_harbor_job(args: argparse.Namespace) -> int:
    from swe_residual.harbor.import_job import import_command

    return import_command(args)


def _n(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def cmd_states_pack(args: argparse.Namespace) -> int:
    from swe_residual.packs.pack import pack_states

    res = pack_states(args.states, args.out, track=args.track, tasks_dir=args.tasks_dir)
    commit = res.tasks.get("commit", "unknown")
    checked = "checked against its tasks" if res.tasks_checked else "not checked against tasks (none found)"
    print(
        f"{res.track}: packed {_n(res.n_states, 'state')} into {res.out} (digest {res.digest[:16]}; {checked}; "
        f"task commit {commit})"
    )
    print(f"install it elsewhere with: swe-residual states fetch {res.out}")
    return 0


def cmd_states_fetch(args: argparse.Namespace) -> int:
    from swe_residual.packs.fetch import fetch_states
    from swe_residual.tracks import states_path_for

    got = fetch_states(args.source, track=args.track, ref=args.ref)
    print(
        f"{got.track}: installed {_n(got.n_states, 'state')} from {args.source} into {got.path} "
        f"(checksums ok, digest {got.digest[:16]})"
    )
    for note in got.notes:
        print(f"note: {note}")
    if states_path_for(got.track, None) == got.path / "states.yaml":
        print(f"runs use them without --states: pytest suites/{got.track} ...")
    return 0


def cmd_states_list(args: argparse.Namespace) -> int:
    from swe_residual.packs.installed import installed_packs
    from swe_residual.tracks import cache_root

    packs = installed_packs()
    if not packs:
        print(f"no states packs installed in {cache_root() / 'states'} (swe-residual states fetch SOURCE)")
        return 0
    for p in packs:
        src = p.source.get("source", "?")
        at = f" @ {p.source['commit'][:12]}" if isinstance(p.source.get("commit"), str) else ""
        ok = "checksums ok" if p.problem is None else f"BROKEN: {p.problem}"
        tasks = p.info.get("tasks") if isinstance(p.info.get("tasks"), dict) else {}
        print(
            f"{p.track}: {_n(p.n_states, 'state')} from {src}{at}, fetched {p.source.get('fetched_at', '?')}, "
            f"task commit {tasks.get('commit', 'unknown')}, {ok} ({p.path})"
        )
        for note in p.notes:
            print(f"  note: {note}")
    return 1 if any(p.problem for p in packs) else 0


USAGE_ERROR = "2 usage error (one line `error: ...` naming the file, option or field)"
RUN_HELP = """\
A run is a pytest run of a suite, suites/<track> ({tracks}):

  pytest suites/<track> --agent NAME [--agent NAME ...] [-n N] [--start clean|residual|both]
  e.g.  pytest suites/demo --agent oracle --agent nop -n 2

`pytest --help` lists the run options (group "swe-residual"); `swe-residual agents` the agent names.
A run exits 0 all cases passed, 1 some failed, 2 interrupted, 4 usage error, 10 a gate failed,
11 invalid run."""


def _exits(*codes: str) -> str:
    """A subcommand's epilog: its exit statuses."""
    return "exit status: " + "; ".join(codes)


def _command(
    sub: argparse._SubParsersAction, name: str, about: str, *exits: str, more: str = ""
) -> argparse.ArgumentParser:
    """A subcommand whose --help says what it does and its exit statuses."""
    return sub.add_parser(
        name, help=about, description=about + (f" {more}" if more else ""), epilog=_exits(*exits)
    )


def build_parser() -> argparse.ArgumentParser:
    from swe_residual.tracks import known_tracks

    p = argparse.ArgumentParser(
        prog="swe-residual",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=f"{__doc__}\n{RUN_HELP.format(tracks=', '.join(known_tracks()))}",
        epilog="Each command's --help lists its options and its exit statuses.",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    v = _command(
        sub,
        "validate",
        "prove every residual state of a track is valid (Stage IV): the oracle solves "
        "the task from clean and from the state, nop fails it, its failing tests match",
        "0 every state valid",
        "1 some state invalid (one line each says why)",
        USAGE_ERROR + ": unknown track, a states file naming an unknown track or task, no tasks, "
        "no Docker engine for a track that needs it",
    )
    v.add_argument(
        "--track",
        default=None,
        help="the track whose states to validate (default: the track of the states file's states; demo)",
    )
    v.add_argument(
        "--states",
        default=str(ROOT / "states.yaml"),
        metavar="PATH",
        help="the states file (default: the project's states.yaml, whose states of tasks not in "
        "--tasks-dir are left out with a note; any other file must name only known tasks)",
    )
    v.add_argument(
        "--tasks-dir",
        default=None,
        metavar="PATH",
        help="the track's tasks (default: as runs find them: the fetched ones, else suites/<track>/tasks)",
    )
    v.add_argument(
        "--backend",
        default=None,
        choices=BACKENDS,
        help="default: the track's default backend (suites/<track>/track.toml), else local",
    )
    v.add_argument("--run-dir", default=None, help="keep the validation runs here (default: a temp dir)")
    v.add_argument("-j", "--jobs", type=int, default=2, help="states validated at once (default 2)")
    v.set_defaults(func=cmd_validate)
    a = _command(
        sub,
        "agents",
        "list every agent name usable with --agent: what it is, what it needs (API key "
        "variables, the `agents` extra) and whether it can run now",
        "0",
        USAGE_ERROR + ": an agent config file that does not read",
    )
    a.add_argument(
        "--agent-config",
        action="append",
        default=[],
        metavar="PATH",
        help="also the agents of this file (agents.yaml's format; repeatable)",
    )
    a.add_argument("--format", choices=["text", "json"], default="text", help="output format (default text)")
    a.set_defaults(func=cmd_agents)
    st = _command(
        sub,
        "states",
        "share Residual States: pack a track's states, fetch a pack into the cache, list what is installed",
        "per subcommand (see its --help)",
    )
    stsub = st.add_subparsers(dest="states_command", required=True, metavar="SUBCOMMAND")
    sp = _command(
        stsub,
        "pack",
        "write one track's states, their patches and trajectories, checksums and "
        "provenance into a self-contained pack (a dir, or a deterministic .tar.gz)",
        "0 packed",
        USAGE_ERROR + ": no states of the track, a state that does not load, --out exists",
    )
    sp.add_argument(
        "--states", required=True, metavar="S", help="the states file (e.g. a work dir's states.yaml)"
    )
    sp.add_argument("--track", default=None, help="the track to pack (default: the only track in S)")
    sp.add_argument(
        "--tasks-dir",
        default=None,
        help="the tasks to check the states against (default: as runs find them); their commit is recorded",
    )
    sp.add_argument("--out", required=True, metavar="PACK", help="a new dir, or PACK.tar.gz")
    sp.set_defaults(func=cmd_states_pack)
    sf = _command(
        stsub,
        "fetch",
        "install a pack into the cache (next to fetched tasks), where runs of its "
        "track find it without --states",
        "0 installed",
        USAGE_ERROR + ", or the pack refused (a checksum that does not match, a hostile archive member, "
        "a pack of another --track); nothing is installed then",
    )
    sf.add_argument(
        "source",
        metavar="SOURCE",
        help="a pack dir, a .tar.gz, an http(s) URL of one, or a git URL (URL.git, git+URL, file:///repo)",
    )
    sf.add_argument("--track", default=None, help="refuse a pack of another track")
    sf.add_argument("--ref", default=None, help="git sources: the branch or tag to clone")
    sf.set_defaults(func=cmd_states_fetch)
    sl = _command(
        stsub,
        "list",
        "the installed packs: track, source, states, checksums checked again",
        "0 every pack intact",
        "1 some pack is broken (its line says why)",
    )
    sl.set_defaults(func=cmd_states_list)
    ss = _command(stsub, "schema", "print the JSON Schema of states.yaml", "0")
    ss.set_defaults(func=cmd_schema)
    r = _command(
        sub,
        "report",
        "recompute every table offline from one or more run dirs (several: merged)",
        "0",
        "11 a results.jsonl line is not a record (named path:line, left out; the tables are still printed)",
        USAGE_ERROR + ": a dir without results.jsonl",
    )
    r.add_argument(
        "run_dirs",
        nargs="+",
        metavar="RUN_DIR",
        help="run dirs (each holds results.jsonl) or run bundles (.tar.gz)",
    )
    r.add_argument(
        "--construction",
        action="append",
        default=[],
        metavar="PATH",
        help="a Residualization work dir's construction.jsonl (or the work dir): Table 5 and "
        "Table 2's prior-attempt steps/minutes",
    )
    r.add_argument(
        "--format",
        choices=["text", "md", "json", "csv"],
        default="text",
        help="text tables (default), Markdown, the whole report as JSON, or one CSV row per record",
    )
    r.add_argument(
        "--html",
        action="store_true",
        help="also write the run page (RUN_DIR/report.html) and one "
        "page per case (RUN_DIR/pages/); the path goes to stderr",
    )
    r.add_argument(
        "--html-dir",
        default=None,
        metavar="DIR",
        help="write the pages here instead (implies --html; needed for several run dirs)",
    )
    r.add_argument("--n-boot", type=int, default=1000, help="bootstrap resamples for the 95%% intervals")
    r.add_argument("--seed", type=int, default=0, help="seed of the bootstrap resampling (default 0)")
    r.set_defaults(func=cmd_report)
    g = _command(
        sub,
        "gate",
        "check CI gates on run dirs: floors and ceilings per track and agent, and a paired "
        "sign-flip test against a baseline run",
        "0 all gates passed",
        "10 regression: a gate was violated (one `GATE:` line each)",
        "11 invalid run: more infra errors than --max-infra, cases without a record, an unreadable "
        "results.jsonl line",
        USAGE_ERROR + ": a dir without results.jsonl",
    )
    g.add_argument(
        "run_dirs",
        nargs="+",
        metavar="RUN_DIR",
        help="the run dirs (or bundles, .tar.gz) to check (several: merged)",
    )
    g.add_argument(
        "--baseline",
        metavar="RUN_DIR",
        help="a baseline run: with --max-drop, fail on a drop "
        "against it on shared tasks that the paired sign-flip test puts beyond noise (p < 0.05)",
    )
    g.add_argument(
        "--min-residual",
        type=float,
        metavar="PCT",
        help="fail (10) when an agent's Residual success is below PCT %%",
    )
    g.add_argument(
        "--min-clean",
        type=float,
        metavar="PCT",
        help="fail (10) when an agent's Clean Start success (Table 3's Ref. Clean) is below PCT %%",
    )
    g.add_argument(
        "--max-gap",
        type=float,
        metavar="PTS",
        help="fail (10) when an agent's Residual Gap (Clean - Residual) exceeds PTS points",
    )
    g.add_argument(
        "--max-drop",
        type=float,
        metavar="PTS",
        help="with --baseline: fail (10) on a drop of Residual or Clean success (or a rise of the "
        "Gap) beyond PTS points that is beyond noise",
    )
    g.add_argument(
        "--max-infra",
        type=float,
        metavar="FRACTION",
        help="invalid run (11) when more than FRACTION of the cases have no valid verdict (infra errors)",
    )
    g.add_argument(
        "--max-flagged",
        type=int,
        metavar="N",
        help="fail (10) when an agent has more than N valid "
        "runs with integrity flags (cheat signals) per track",
    )
    g.add_argument(
        "--html-dir",
        default=None,
        metavar="D",
        help="with --baseline: write the comparison page "
        "(compare.html, as `swe-residual compare` writes it) here (default: the first RUN_DIR)",
    )
    g.set_defaults(func=cmd_gate)
    rg = _command(
        sub,
        "regrade",
        "grade every recorded final state of a run again with the current (or a new) task version, "
        "into a new run dir; no agent runs, the original run is only read",
        "0 re-graded (a `not re-gradable: CASE: why` line for each case that could not be)",
        USAGE_ERROR + ": RUN is neither a run dir nor a bundle, --out not empty, the backend's engine "
        "does not answer",
        more="Repository final states are graded from their recorded final.patch; machine final states "
        "were graded in the agent's container and kept no snapshot, so they are listed as not re-gradable.",
    )
    rg.add_argument("run", metavar="RUN", help="the run dir (or a bundle, .tar.gz) to grade again")
    rg.add_argument(
        "--tasks-dir",
        default=None,
        metavar="DIR",
        help="the task versions to grade with (default: the track's)",
    )
    rg.add_argument(
        "--out",
        default=None,
        metavar="NEW_RUN",
        help="the new run dir (default: RUN-regrade-<UTC time> beside RUN)",
    )
    rg.add_argument(
        "--backend",
        default=None,
        choices=list(BACKENDS),
        help="where to grade (default: the backend the run used)",
    )
    rg.set_defaults(func=cmd_regrade)
    rn = _command(sub, "run", "what to do with a finished run dir", "per subcommand (see its --help)")
    rnsub = rn.add_subparsers(dest="run_command", required=True, metavar="SUBCOMMAND")
    rp = _command(
        rnsub,
        "pack",
        "write a run dir as one relocatable bundle (.tar.gz) that report, compare, gate and regrade read "
        "where a run dir is accepted",
        "0 written",
        USAGE_ERROR + ": RUN is not a run dir, --out is no .tar.gz",
        more="The bundle holds the records, manifest, provenance and artifacts (relative paths), with this "
        "machine's paths replaced in the text files the harness wrote; the pages are made again by `report`.",
    )
    rp.add_argument("run", metavar="RUN", help="the run dir")
    rp.add_argument("--out", required=True, metavar="FILE.tar.gz", help="the bundle to write")
    rp.set_defaults(func=cmd_run_pack)
    t = _command(
        sub, "tasks", "get the task dirs of tracks that do not ship them", "per subcommand (see its --help)"
    )
    tsub = t.add_subparsers(dest="tasks_command", required=True, metavar="SUBCOMMAND")
    tf = _command(
        tsub,
        "fetch",
        "clone or update a track's task repository into the cache "
        "(shallow; $SWE_RESIDUAL_CACHE, else $XDG_CACHE_HOME/swe-residual, else ~/.cache/swe-residual)",
        "0 cloned, updated or up to date (with --images: every task's image prepared)",
        "1 with --images: some task's image could not be prepared (one line each says why)",
        USAGE_ERROR + ", or the fetch failed (git error, no task dirs "
        "where the track expects them, a link out of the clone, a task dir that differs from the digest "
        "its dataset.toml lists); the previous clone stays usable",
    )
    tf.add_argument(
        "track",
        metavar="TRACK",
        help="the track (deepswe, terminal-bench; its track.toml names the repository)",
    )
    tf.add_argument(
        "--version",
        default=None,
        help="which published version, for a track that names several (terminal-bench: 2.1 or 2.0; "
        "default: the track's default_version)",
    )
    tf.add_argument(
        "--ref",
        default=None,
        help="branch, tag or commit (default: the track's configured ref, "
        "else the repository's default branch)",
    )
    tf.add_argument(
        "--dest",
        default=None,
        metavar="DIR",
        help="clone here instead of <cache>/tasks/<track> (runs then need --tasks-dir)",
    )
    tf.add_argument(
        "--url", default=None, help="repository to clone instead of the track's (a mirror, file://...)"
    )
    tf.add_argument(
        "--images",
        action="store_true",
        help="also prepare every task's image now (Docker): its [environment] docker_image pulled when "
        "a registry answers, else environment/ built; one line per task, saying why for one that "
        "cannot be prepared (then exit 1)",
    )
    tf.set_defaults(func=cmd_tasks_fetch)
    from swe_residual.residualize.cli import add_parser as add_residualize

    add_residualize(sub)
    from swe_residual.report.compare import add_parser as add_compare

    add_compare(sub)
    e = _command(
        sub, "export", "export a track's cases for other harnesses", "per subcommand (see its --help)"
    )
    esub = e.add_subparsers(dest="export_command", required=True, metavar="SUBCOMMAND")
    eh = _command(
        esub,
        "harbor",
        "one Harbor task dir per (task, start): clean copies and residual "
        "starts whose environment applies the state uncommitted; index in export.json",
        "0 exported",
        USAGE_ERROR + ": unknown track, a states file that does not load, --out not empty",
    )
    eh.add_argument("--track", required=True, help="the track to export (e.g. demo)")
    eh.add_argument(
        "--states",
        default=str(ROOT / "states.yaml"),
        metavar="PATH",
        help="the states file (default: the project's states.yaml)",
    )
    eh.add_argument(
        "--tasks-dir",
        default=None,
        metavar="PATH",
        help="the track's tasks (default: as runs find them: the fetched ones, else suites/<track>/tasks)",
    )
    eh.add_argument(
        "--start",
        choices=["clean", "residual", "both"],
        default="both",
        help="which starts to export (default both)",
    )
    eh.add_argument(
        "--out", required=True, metavar="DIR", help="new (or empty) dir to write the task dirs into"
    )
    eh.set_defaults(func=cmd_export_harbor)
    im = _command(
        sub, "import", "import runs made by other harnesses into a run dir", "per subcommand (see its --help)"
    )
    imsub = im.add_subparsers(dest="import_command", required=True, metavar="SUBCOMMAND")
    ih = _command(
        imsub,
        "harbor-job",
        "Harbor / Pier job dirs of exported tasks -> results.jsonl, "
        "artifacts and manifest.json, so report and gate work on them",
        "0 every trial imported (or there already)",
        "1 some trials could not be (one line each)",
        USAGE_ERROR + ", before anything is written",
    )
    ih.add_argument(
        "jobs", nargs="+", metavar="JOB_DIR", help="a job dir, a dir of job dirs or one trial dir"
    )
    ih.add_argument(
        "--run-dir", required=True, metavar="RUN", help="new or existing run dir to add the trials to"
    )
    ih.add_argument(
        "--export",
        action="append",
        default=[],
        metavar="DIR",
        help="the dir `swe-residual export harbor` wrote (repeatable; default: the one each "
        "trial's config.json task path is in)",
    )
    ih.add_argument(
        "--agent",
        default=None,
        metavar="NAME",
        help="record every trial under this agent name (as "
        "given to pytest --agent) instead of <harbor agent>@<model>",
    )
    ih.add_argument(
        "--append",
        action="store_true",
        help="add trials of cases the run dir already has records of, as further attempts",
    )
    ih.set_defaults(func=cmd_import_harbor_job)
    i = _command(sub, "images", "manage Docker images", "per subcommand (see its --help)")
    isub = i.add_subparsers(dest="images_command", required=True, metavar="SUBCOMMAND")
    b = _command(
        isub,
        "bootstrap",
        "build the base images bundled tasks name, offline (debootstrap); as root, "
        "start dockerd when no engine answers",
        "0 every base image present or built",
        "1 a base image could not be built (no engine and not root, debootstrap missing or failing: "
        "the error says which)",
    )
    b.set_defaults(func=cmd_images)
    for name, func, about in (
        (
            "list",
            cmd_images_list,
            "list what the harness keeps between runs about the engine's images (probed "
            "image facts, images it built, build logs, machine snapshots, CRIU probes; with --run-dir, a run's "
            "reference checks): what each describes, its age and whether that still exists (exit 0)",
        ),
        (
            "prune",
            cmd_images_prune,
            "remove the kept entries whose image (or tag, or snapshot) no longer exists, "
            "or were written by an older probe; with --all every entry and the images the harness built. Exit 0 "
            "when all went, 1 when some could not be removed (an image in use), 2 when no engine answers "
            "(without --all)",
        ),
    ):
        ip = isub.add_parser(
            name,
            help=about,
            description=about,
            epilog=_exits("0 listed")
            if name == "list"
            else _exits(
                "0 all went",
                "1 some could not be removed",
                "2 no engine answers (without --all), or a usage error",
            ),
        )
        ip.add_argument(
            "--cache-dir",
            default=None,
            metavar="DIR",
            help="the harness's Docker cache "
            "(default: $SWE_RESIDUAL_DOCKER_CACHE, else <tmp>/swe-residual-docker)",
        )
        ip.add_argument(
            "--run-dir",
            action="append",
            default=[],
            metavar="RUN",
            help="also the reference checks cached in this run dir (repeatable)",
        )
        ip.add_argument(
            "--task",
            action="append",
            default=[],
            metavar="ID",
            help="only the images (and image facts) of this task (repeatable)",
        )
        if name == "list":
            ip.add_argument(
                "--format", choices=["text", "json"], default="text", help="output format (default text)"
            )
        else:
            ip.add_argument(
                "--all",
                action="store_true",
                help="every entry, the harness's images included "
                "(children before parents; use it while no run uses the engine); base images and "
                "locks are never touched",
            )
            ip.add_argument(
                "--dry-run", action="store_true", help="print what would be removed, remove nothing"
            )
        ip.set_defaults(func=func)
    _cluster_parser(sub)
    return p


def _cluster_parser(sub: argparse._SubParsersAction) -> None:
    """`swe-residual cluster head | join | status` (docs/cluster.md; the `cluster` extra)."""
    c = _command(sub, "cluster", "run suites on a Ray cluster (docs/cluster.md)", "per subcommand")
    csub = c.add_subparsers(dest="cluster_command", required=True, metavar="SUBCOMMAND")
    h = _command(
        csub,
        "head",
        "start the cluster's head node (no case slots); prints the join line",
        "0 started",
        "2 usage error (Ray missing)",
    )
    h.add_argument("--port", type=int, default=6379, help="the head's port (default 6379)")
    h.add_argument("--node-ip-address", default=None, metavar="IP", help="the address nodes reach it at")
    h.add_argument("--temp-dir", default=None, metavar="DIR", help="Ray's temp dir for this node")
    h.add_argument("--block", action="store_true", help="stay in the foreground")
    h.set_defaults(func=cmd_cluster)
    j = _command(
        csub,
        "join",
        "join a cluster as a node that runs cases, after checking its engine and base images",
        "0 joined",
        "2 usage error (no head there, no engine, Ray missing)",
    )
    j.add_argument("address", metavar="ADDRESS", help="the head, HOST:PORT")
    j.add_argument("--slots", type=int, required=True, metavar="N", help="cases this node runs at once")
    j.add_argument("--name", default=None, help="the node's name in records (default: its hostname)")
    j.add_argument("--backend", default="docker", choices=["docker", "local"], help="default docker")
    j.add_argument(
        "--images-from",
        default=None,
        metavar="URL",
        help="load missing base images from this Docker engine instead of bootstrapping them",
    )
    j.add_argument(
        "--image",
        action="append",
        default=[],
        metavar="REF",
        help="also an image the node must hold (e.g. a task image; repeatable)",
    )
    j.add_argument("--block", action="store_true", help="stay in the foreground")
    j.add_argument(
        "--ray-arg",
        action="append",
        default=[],
        metavar="OPTION",
        help="one more `ray start` option, e.g. --ray-arg=--temp-dir=/data/ray (repeatable)",
    )
    j.set_defaults(func=cmd_cluster)
    st = _command(
        csub,
        "status",
        "list the cluster's nodes, their case slots and running cases",
        "0 listed",
        "2 no head there, or Ray missing",
    )
    st.add_argument("address", metavar="ADDRESS", help="the head, HOST:PORT")
    st.add_argument("--format", choices=["text", "json"], default="text", help="output format (default text)")
    st.set_defaults(func=cmd_cluster)


def cmd_cluster(args: argparse.Namespace) -> int:
    from swe_residual.cluster import nodes

    if args.cluster_command == "head":
        return nodes.head(args.port, args.node_ip_address, args.temp_dir, args.block)
    if args.cluster_command == "join":
        options = {
            "backend": args.backend,
            "images_from": args.images_from,
            "images": args.image,
            "block": args.block,
            "ray_args": args.ray_arg,
        }
        return nodes.join(args.address, args.slots, args.name, options)
    return nodes.status(args.address, as_json=args.format == "json")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    if not (sys.argv[1:] if argv is None else argv):  # bare `swe-residual`: what it can do
        parser.print_help()
        return 2
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

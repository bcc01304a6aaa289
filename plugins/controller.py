"""The run's session in pytest: the controller opens it (configuration checked before any case;
run dir created or resumed) and every xdist worker joins it; the suite's test is parametrized with
the plan's cases. Workers run cases through the `swe_result` fixture, which appends records to
results.jsonl; reports carry nothing of ours (the case id is in the test id), and a failure shows
its reason. At the end the controller's session reads results.jsonl back and writes the summary,
tables and the gate exit status; the controller then writes run-info.json (environment, requests),
the run page report.html and one page per case (swe_residual/report/html/run_page.py).
pytest-html writes its own per-test report only where --html asks.
"""

from __future__ import annotations

import shlex
import sys
import textwrap
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from plugins.display import LiveView
from plugins.options import ROOT, check_gate_baseline, check_something_to_run, progress_mode, run_plan
from swe_residual.backends import backend_class
from swe_residual.errors import InfraError, InputError, RunDirError
from swe_residual.progress import EventChannel
from swe_residual.results import RESULTS, RUN_PAGE
from swe_residual.run.plan import check_backend, run_backend, tracks_in
from swe_residual.run.regrade import regrade_mode
from swe_residual.run.session import RunSession, SessionOptions

if TYPE_CHECKING:
    from swe_residual.report.gates import GateConfig

# report code (tables, gates, pages) is imported where the end of a run needs it: `pytest --help` and
# the configure step stay light

SESSION_KEY = pytest.StashKey[RunSession]()


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def get_session(config: pytest.Config) -> RunSession | None:
    return config.stash.get(SESSION_KEY, None)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    try:
        suite_dirs = tracks_in(config.args, ROOT / "suites")
    except InputError as exc:  # a misspelt track: before pytest's own "file not found"
        raise pytest.UsageError(str(exc)) from None
    if not suite_dirs:
        return
    opt = config.getoption
    try:
        plan = run_plan(suite_dirs, opt)
        backend = run_backend(plan, opt("swe_backend"))
        options = SessionOptions(
            backend=backend,
            agent_timeout=opt("swe_agent_timeout"),
            infra_retries=opt("swe_infra_retries"),
            docker_hosts=opt("swe_docker_hosts"),
            cluster=opt("swe_cluster"),
            max_case_cost=_positive(opt("swe_max_case_cost"), "--max-case-cost"),
            max_run_cost=_positive(opt("swe_max_run_cost"), "--max-run-cost"),
            spend_from=int(getattr(config, "workerinput", {}).get("swe_residual_spend_from", 0)),
            # this process runs one case at a time, beside its fellow workers
            regrade_mode=regrade_mode(
                int(getattr(config, "workerinput", {}).get("workercount", 1)),
                backend_class(backend).interruptible,
            ),
        )
        if _is_worker(config):
            worker = config.workerinput.get("workerid", "gw0")
            session = RunSession(
                plan,
                Path(config.workerinput["swe_residual_run_dir"]),
                replace(options, host_index=int(worker[2:]) if worker[2:].isdigit() else 0),
            )
            session.worker = worker
            channel = config.workerinput.get("swe_residual_progress")
            if channel:  # what this worker does, for the controller's display
                session.events = EventChannel(channel).send
        else:
            resume = opt("swe_resume")
            run_dir = Path(resume or opt("swe_run_dir") or ROOT / "reports" / time.strftime("%Y%m%d-%H%M%S"))
            check_something_to_run(config, plan)
            check_gate_baseline(opt("swe_gate_baseline"))
            if options.cluster:
                check_cluster_usage(config)
            else:
                check_backend(plan, options.backend, opt("swe_docker_hosts"))
            # without xdist the selection (-k, node ids) is known after collection: only the states
            # of the selected cases are checked then (Controller._collected); xdist's controller
            # never collects, so it checks them all now (a check that passed is cached)
            defer = getattr(config.option, "dist", "no") == "no"
            session = RunSession.open(plan, run_dir, options, resume=bool(resume), check_states=not defer)
            if options.cluster:  # Ray is imported here only: a run without --cluster never loads it
                from swe_residual.cluster.dispatch import ClusterRunner

                session.remote = ClusterRunner(session, options.cluster)
    except InputError as exc:
        raise pytest.UsageError(str(exc)) from None
    html_path = opt("htmlpath", None)  # pytest-html's own report, only where --html asks for it
    if html_path and Path(html_path).resolve() == (session.run_dir / RUN_PAGE).resolve():
        raise pytest.UsageError(
            f"--html {html_path}: that is the run page SWE-Residual writes; "
            "pass another path for pytest-html's report"
        )
    config.stash[SESSION_KEY] = session
    if session.max_run_cost is not None:
        config.pluginmanager.register(RunCostGuard(session), "swe-residual-run-cost")
    if _is_worker(config):
        config.pluginmanager.register(WorkerEnd(session), "swe-residual-worker-end")
    else:
        controller = Controller(config, session, states_deferred=defer)
        config.pluginmanager.register(controller, "swe-residual-controller")
        config.pluginmanager.register(LateFinish(controller), "swe-residual-late-finish")
        # Cases last seconds to hours: idle workers steal pending cases instead of waiting behind a
        # chunk; and xdist's `load` scheduler aborts the whole run (INTERNALERROR) after a worker
        # crash, `worksteal` reschedules. An explicit --dist is kept.
        explicit = any(
            a == "--dist" or a.startswith("--dist=") or a == "-d" for a in config.invocation_params.args
        )
        if getattr(config.option, "dist", None) == "load" and not explicit:
            config.option.dist = "worksteal"
        # nothing to run (no cases, or --resume of a complete run): start no workers at all
        if getattr(config.option, "dist", "no") != "no" and all(
            session.done(c.id) for c in session.plan.cases
        ):
            config.option.dist = "no"
            config.option.numprocesses = None
        mode = progress_mode(config)
        if mode != "off":
            try:
                config.pluginmanager.register(LiveView(config, session, mode), "swe-residual-progress")
            except OSError as exc:  # no temp dir for the channel: the run goes on without a display
                print(f"swe-residual: no progress display ({exc.strerror or exc})", file=sys.stderr)
    _freeze_heap()


def check_cluster_usage(config: pytest.Config) -> None:
    """--cluster runs every case from this one process: -n has no meaning there (exit 4)."""
    if getattr(config.option, "numprocesses", None) or getattr(config.option, "dist", "no") != "no":
        raise InputError(
            "--cluster with -n: the cluster's case slots decide how many cases run at once; drop -n "
            "(the controller submits every case to the cluster from this one process)"
        )


def _positive(value: float | None, option: str) -> float | None:
    if value is not None and not value > 0:
        raise InputError(f"{option} {value:g}: a cost limit is a number of USD above 0")
    return value


class RunCostGuard:
    """--max-run-cost in every process that runs cases: once this invocation's records cost the
    limit, a case not yet started is skipped (it has no record: "not run"), so the cases an xdist
    worker already holds do not start after the controller stopped the run."""

    def __init__(self, session: RunSession):
        self.session = session

    @pytest.hookimpl(tryfirst=True)  # before the case's fixture would run it
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        why = self.session.over_budget()
        if why:
            pytest.skip(why)


class WorkerEnd:
    """An xdist worker removes what its cases left on the engines before it tells the controller
    it has finished (xdist's own sessionfinish wraps this one): the controller ends the run, and
    kills a worker still busy at exit, soon after that message."""

    def __init__(self, session: RunSession):
        self.session = session

    def pytest_sessionfinish(self) -> None:
        self.session.close()


def _freeze_heap() -> None:
    """What exists now (modules, models, the plan) lives until the process ends: out of the
    garbage collector's sight (gc.freeze), so its full collections during a large collection and
    pytest's collection at exit scan only what came after."""
    import gc

    gc.freeze()


def pytest_unconfigure(config: pytest.Config) -> None:
    session = get_session(config)
    if session is not None:
        session.close()
        _freeze_heap()  # the end of the run: nothing of ours is left to collect


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:  # xdist hook, controller side
    session = get_session(node.config)
    if session is not None:
        node.workerinput["swe_residual_run_dir"] = str(session.run_dir)
        node.workerinput["swe_residual_spend_from"] = session.spend_from
        view = node.config.pluginmanager.get_plugin("swe-residual-progress")
        if view is not None:
            node.workerinput["swe_residual_progress"] = str(view.channel.path)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "swe_result" not in metafunc.fixturenames:
        return
    session = get_session(metafunc.config)
    track = getattr(metafunc.module, "TRACK", Path(metafunc.module.__file__).parent.name)
    info = session.plan.tracks.get(track) if session is not None else None
    cases = session.plan.cases_of(track) if info is not None else []
    if info is None or info.skip_reason or not cases:
        reason = (
            f"track {track!r} not selected"
            if info is None
            else info.skip_reason or f"no cases for track {track!r}"
        )
        metafunc.parametrize(
            "swe_result",
            [pytest.param(None, marks=pytest.mark.skip(reason=reason))],
            ids=[f"{track}-skipped"],
            indirect=True,
        )
        return
    # the case goes straight to the swe_result fixture (request.param): one fixture per case
    metafunc.parametrize("swe_result", cases, ids=[c.id for c in cases], indirect=True)


def case_id_of(nodeid: str) -> str:
    return nodeid.rsplit("[", 1)[-1].rstrip("]") if "[" in nodeid else nodeid


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    session = get_session(config)
    if session is None or not session.valid_before:
        return
    keep, done = [], []
    for item in items:
        (done if session.done(case_id_of(item.nodeid)) else keep).append(item)
    if done:
        config.hook.pytest_deselected(items=done)
        items[:] = keep


LINE_MAX = 200  # a failure's reason is folded into lines of at most this many characters


def fold(text: str, width: int = LINE_MAX) -> str:
    """`text` with every line longer than `width` wrapped (nothing cut: ids and test names stay whole)."""
    return "\n".join(
        part
        for line in text.splitlines() or [""]
        for part in (textwrap.wrap(line, width, break_long_words=False, break_on_hyphens=False) or [""])
    )


def expected_failure(record, run_dir: Path | None = None) -> str | None:
    """Why a failure needs no reading: the built-in nop submits the starting state as it is, so it
    fails wherever a hidden test fails at the start (on a track that grades committed work only,
    the line says that nothing was committed). None for every other failure."""
    if record is None or record.agent != "nop" or record.harness != "builtin" or record.outcome != 0:
        return None
    from swe_residual.report.graded import graded_note

    failing = sum(1 for status in record.tests.values() if status != "passed")
    note = graded_note(record.artifacts, str(run_dir)) if run_dir else ""
    return f"{failing} of {len(record.tests)} hidden tests fail{note}"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """Infra errors and failing verdicts as their reason, folded to LINE_MAX columns (no traceback);
    a failure of the built-in nop as one line, marked so the controller lists it apart."""
    report = yield
    if call.excinfo is not None and call.excinfo.errisinstance(InfraError):
        report.longrepr = fold(f"InfraError: {call.excinfo.value}")
    elif (
        report.failed
        and call.when == "call"
        and call.excinfo is not None
        and call.excinfo.errisinstance(pytest.fail.Exception)
        and not call.excinfo.value.pytrace
    ):
        rec = getattr(item, "funcargs", {}).get("swe_result")
        session = get_session(item.config)
        run_dir = session.run_dir if session is not None else None
        why = expected_failure(rec, run_dir)
        if why:
            report.longrepr = f"{rec.case_id}: nop submitted the starting state unchanged; {why} (expected)"
            report.swe_residual_expected = why  # kept on the report through xdist
        else:
            from swe_residual.report.graded import graded_note

            note = graded_note(rec.artifacts, str(run_dir)) if rec is not None and run_dir else ""
            report.longrepr = fold(str(call.excinfo.value.msg) + note)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int):
    """A run dir that cannot be written while the run's outputs (summary, HTML) are written is an
    invalid run (exit 11, one line), never a traceback."""
    controller = session.config.pluginmanager.get_plugin("swe-residual-controller")
    try:
        return (yield)
    except OSError as exc:
        if controller is None:
            raise
        from swe_residual.report.gates import EXIT_INVALID

        controller.run_dir_error = controller.run_dir_error or (
            f"run dir {controller.session.run_dir} cannot be written: {exc.strerror or exc}"
        )
        session.exitstatus = EXIT_INVALID
        return None


class Controller:
    """Controller-side hooks: the collected cases, crashed workers, the end of the run."""

    def __init__(self, config: pytest.Config, session: RunSession, states_deferred: bool = False):
        self.config = config
        self.session = session
        self.states_deferred = states_deferred  # the selected cases' states are checked at collection
        self.refused = False  # ... and one did not apply: a usage error, no run, no outputs
        self.collected: list[str] | None = None
        self.summary: dict | None = None
        self.run_page: Path | None = None
        self.run_dir_error: str | None = None
        self.interrupted = False  # Ctrl-C (or xdist's -x): the run stopped before its last case, exit 2
        self.stopped: str | None = None  # why --max-run-cost stopped the run (it ends interrupted too)
        self.finished_cases = 0
        self.pytest_session: pytest.Session | None = None
        self.deferred = False  # ... with xdist: finished once the workers are gone (LateFinish)

    @pytest.hookimpl(wrapper=True)  # around pytest's own: after its header
    def pytest_sessionstart(self, session: pytest.Session):
        """What the plan left out, one line each, once (the controller's plan)."""
        self.pytest_session = session
        result = yield
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        for note in self.session.plan.notes if reporter is not None else ():
            reporter.write_line(f"note: {note}", yellow=True)
        return result

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node, ids: list[str]) -> None:
        if self.collected is None:
            self._collected([case_id_of(i) for i in ids])

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if self.collected is None and (session.items or self.config.getoption("swe_resume")):
            self._collected([case_id_of(i.nodeid) for i in session.items])

    def _collected(self, case_ids: list[str]) -> None:
        """The manifest names the cases this run will actually run (after -k, --resume, ...)."""
        by_id = self.session.plan.by_id
        self.collected = [c for c in case_ids if c in by_id]
        if self.states_deferred:
            try:
                self.session.check_selected(self.collected)
            except InputError as exc:
                self.refused = True
                raise pytest.UsageError(str(exc)) from None
        self.session.write_manifest(self.collected)
        if self.session.remote is not None and not self.config.getoption("collectonly"):
            # --cluster: every case is submitted now, each test waits for its own
            self.session.remote.start([by_id[c] for c in self.collected if not self.session.done(c)])
        view = self.config.pluginmanager.get_plugin("swe-residual-progress")
        if view is not None:
            view.cases(self.collected)
        resume = self.config.getoption("swe_resume")
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if resume and reporter is not None:
            kept = len(self.session.valid_before & set(by_id))
            again = sum(1 for c in self.collected if c in self.session.attempts_before)
            reporter.write_line(
                f"--resume {resume}: kept {kept} cases with a valid verdict; running "
                f"{len(self.collected)} ({again} again after an infra error or a crash, "
                f"{len(self.collected) - again} not run before)"
            )

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """--max-run-cost: after each case, stop scheduling when this invocation's records cost the
        limit and some case has not run (the run ends as an interrupt: exit 2, the resume line)."""
        if report.when != "teardown" or self.session.max_run_cost is None or self.stopped:
            return
        self.finished_cases += 1
        why = self.session.over_budget()
        if why is None or self.finished_cases >= len(self.collected or ()):
            return
        self.stopped = why
        dsession = self.config.pluginmanager.get_plugin("dsession")
        if dsession is not None:  # xdist: shuts the workers down, then raises Interrupted
            dsession.shouldstop = why
        elif self.pytest_session is not None:  # pytest's loop raises Interrupted after this case
            self.pytest_session.shouldstop = why

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report, sched) -> None:
        self.session.crash_record(case_id_of(crashitem), "the worker process died while running the case")

    @pytest.hookimpl(tryfirst=True)  # before pytest-html renders the report
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        opt = self.config.getoption
        if self.session.remote is not None:  # --cluster: nothing more runs; cancel what still does
            self.session.remote.close()
        if opt("collectonly") or opt("setupplan") or opt("setuponly") or self.refused:
            return  # nothing ran: the manifest names the cases, there is nothing to report
        # exit 2 only: a run stopped by -x without xdist exits 1 and keeps its missing cases (gate: 11)
        self.interrupted = exitstatus == pytest.ExitCode.INTERRUPTED
        if self.interrupted and self.config.pluginmanager.has_plugin("dsession"):
            self.deferred = True  # xdist's workers are still running: count after they are gone
            return
        self._finish(session, exitstatus)

    def resume_command(self) -> str:
        """The command that completes this run: the same arguments, --resume RUN_DIR for --run-dir."""
        args, skip = [], False
        for arg in self.config.invocation_params.args:
            if skip:
                skip = False
            elif arg in ("--run-dir", "--resume"):
                skip = True
            elif not arg.startswith(("--run-dir=", "--resume=")):
                args.append(arg)
        return shlex.join(["pytest", *args, "--resume", str(self.session.run_dir)])

    def _finish(self, session: pytest.Session, exitstatus: int) -> None:
        """summary.json, tables and the pages from results.jsonl; the gates' exit status. An
        interrupted run counts what it recorded and what it did not run, and checks no gate."""
        from swe_residual.report.gates import GateConfig

        opt = self.config.getoption
        gates = GateConfig(
            min_residual=opt("swe_gate_min_residual"),
            min_clean=opt("swe_gate_min_clean"),
            max_gap=opt("swe_gate_max_gap"),
            max_drop=opt("swe_gate_max_drop"),
            max_infra_fraction=opt("swe_gate_max_infra"),
            max_flagged=opt("swe_gate_max_flagged"),
        )
        from swe_residual.report.bundle import opened

        given = opt("swe_gate_baseline")
        with opened([given] if given else []) as dirs:  # a bundle: extracted safely into a temporary dir
            self._finish_against(session, exitstatus, gates, dirs[0] if dirs else None)

    def _finish_against(
        self, session: pytest.Session, exitstatus: int, gates: GateConfig, baseline: str | None
    ) -> None:
        from swe_residual.report.gates import EXIT_INVALID

        collected = self.collected
        if collected is None and self.interrupted:  # stopped before the workers had collected
            collected = [c.id for c in self.session.plan.cases if not self.session.done(c.id)]
        try:
            self.summary, gate = self.session.finish(
                collected or [],
                gates,
                Path(baseline) if baseline else None,
                interrupted=self.interrupted,
                resume=self.resume_command() if self.interrupted else "",
                reason=self.stopped or "",
            )
            self.run_page = self._write_pages()
            if baseline and gate is not None and not self.interrupted:
                from swe_residual.report.compare import page_for  # the paired comparison behind the gate

                page_for(
                    self.session.comparison,
                    [baseline],
                    [self.session.run_dir],
                    self.session.run_dir,
                    option="--gate-baseline",
                )
        except (OSError, RunDirError) as exc:  # the run dir cannot be written: the run is invalid
            self.run_dir_error = f"run dir {self.session.run_dir} cannot be written: {exc}"
            session.exitstatus = EXIT_INVALID
            return
        if (
            exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED
            and self.session.valid_before
            and not self.collected
        ):
            session.exitstatus = pytest.ExitCode.OK  # --resume of a complete run: nothing left to run
        if gate is not None and gate.status:
            session.exitstatus = gate.status

    def _write_pages(self) -> Path:
        """run-info.json, then the run page and the case pages, from the run dir alone."""
        from swe_residual.report.html.run_page import RunInfo, task_requests, write_browser, write_run_info
        from swe_residual.report.tables import load_runs

        run_dir = self.session.run_dir
        tasks = {(c.task.track, c.task.id): c.task for c in self.session.plan.cases}
        write_run_info(
            run_dir, RunInfo(environment=self._environment(), requests=task_requests(tasks.values()))
        )
        records, manifest = self.session.loaded or load_runs([run_dir])
        return write_browser(run_dir, self.summary, records, manifest, [run_dir]).run_page

    def _environment(self) -> dict[str, str]:
        """The environment block of the run page (shown last)."""
        import platform
        import shlex
        import sys

        from swe_residual import __version__

        config, plan = self.config, self.session.plan
        plugins = sorted(
            {f"{dist.project_name} {dist.version}" for _, dist in config.pluginmanager.list_plugin_distinfo()}
        )
        return {
            "SWE-Residual": __version__,
            "Python": f"{platform.python_version()} ({sys.executable})",
            "Platform": platform.platform(),
            "pytest": pytest.__version__,
            "pytest plugins": ", ".join(plugins),
            "Command": shlex.join(["pytest", *config.invocation_params.args]),
            "Working dir": str(config.invocation_params.dir),
            "Run dir": str(self.session.run_dir),
            "Tracks": ", ".join(sorted(plan.tracks)),
            "Agents": ", ".join(config.getoption("swe_agents") or ["oracle", "nop"]),
            "Backend": self.session.backend_name,
            "Start": config.getoption("swe_start"),
            "Workers": str(getattr(config.option, "numprocesses", None) or 0),
            "Finished": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        }

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_terminal_summary(self, terminalreporter, exitstatus, config):
        # outermost wrapper: the tables come last, after pytest's short test summary. The built-in
        # nop's failures are expected: they leave pytest's FAILURES and short summary (one line
        # each in our section instead) and come back before the final counts line.
        failed = terminalreporter.stats.get("failed")
        expected = sorted(
            (r for r in failed or () if getattr(r, "swe_residual_expected", None)), key=lambda r: r.nodeid
        )
        if expected:
            terminalreporter.stats["failed"] = [
                r for r in failed if not getattr(r, "swe_residual_expected", None)
            ]
        try:
            result = yield
        finally:
            if expected:
                terminalreporter.stats["failed"] = failed
        if self.summary is not None or expected:
            terminalreporter.section("SWE-Residual")
        if expected:
            terminalreporter.write_line(
                f"expected failures of the built-in nop agent (it submits the starting state "
                f"unchanged): {len(expected)}"
            )
            for r in expected:
                terminalreporter.write_line(f"  {case_id_of(r.nodeid)}: {r.swe_residual_expected}")
        if self.summary is not None:
            self._print_summary(terminalreporter, config)
        if self.run_dir_error is not None:
            from swe_residual.report.gates import EXIT_INVALID

            terminalreporter.write_line(f"INVALID RUN (exit {EXIT_INVALID}): {self.run_dir_error}", red=True)
        return result

    def _print_summary(self, tr, config) -> None:
        from swe_residual.report.tables import interrupted_lines, render_text

        summary = self.summary
        wide = config.getoption("swe_tables") == "wide"
        for line in render_text(summary, wide=wide).rstrip().splitlines():
            tr.write_line(line)
        cases = summary["cases"]
        for line in interrupted_lines(summary):
            tr.write_line(line, yellow=True)
        if cases["missing"]:
            tr.write_line(
                f"missing cases (no record): {len(cases['missing'])}: {', '.join(cases['missing'][:5])}",
                red=True,
            )
        if self.session.loaded is not None:  # agents that never started: their first error line
            from swe_residual.agents.preflight import not_started_lines

            for line in not_started_lines(self.session.loaded[0].rows):
                tr.write_line(line, red=True)
        if cases["infra_errors"]:
            tr.write_line(f"infra errors (no outcome recorded): {len(cases['infra_errors'])}", yellow=True)
        gates = summary.get("gates")
        if gates is not None:
            from swe_residual.report.gates import check_lines

            for line in check_lines(gates):  # the numbers behind every verdict, as `swe-residual gate`
                tr.write_line(line, red=line.startswith(("GATE:", "gates: failed")))
        tr.write_line(f"results: {self.session.run_dir / RESULTS}")
        if self.run_page is not None:
            tr.write_line(f"report:  {self.run_page.resolve()}")
        html_path = config.getoption("htmlpath", None)
        if html_path:
            tr.write_line(f"pytest-html: {Path(html_path).resolve()}")

    @pytest.hookimpl(optionalhook=True)
    def pytest_html_results_summary(self, prefix, summary, postfix, session) -> None:
        """pytest-html's report (only with --html PATH) gets the tables above its test list."""
        from swe_residual.report.html.run_page import render_html_fragment

        if self.summary is not None:
            prefix.append(render_html_fragment(self.summary))


class LateFinish:
    """An interrupted xdist run is counted after xdist's own sessionfinish stopped the workers
    (trylast): cases still running then end with no record, and every record they did write is in."""

    def __init__(self, controller: Controller):
        self.controller = controller

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.controller.deferred:
            self.controller.deferred = False
            self.controller._finish(session, exitstatus)

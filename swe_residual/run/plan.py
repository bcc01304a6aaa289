"""What a run will do: tracks, tasks, states, agents and the resulting cases.

Built identically on the pytest controller and on every xdist worker from the command line, so
case ids agree everywhere without sending objects between processes.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from swe_residual.agents import AgentRegistry
from swe_residual.backends import backend_class
from swe_residual.backends.base import machine_refusal
from swe_residual.errors import InputError, names_list, unknown_name
from swe_residual.run.attempt import Case, build_cases
from swe_residual.states import LoadedState, ResidualState, read_states
from swe_residual.tasks import Task, load_tasks
from swe_residual.tracks import BUNDLED_STATES, SUITES_ROOT, known_tracks, load_track_config, tasks_dir_for


@dataclass
class Track:
    name: str
    tasks_dir: Path | None
    tasks: dict[str, Task] = field(default_factory=dict)
    skip_reason: str | None = None


@dataclass
class Plan:
    tracks: dict[str, Track]
    states: list[LoadedState]
    cases: list[Case]
    registry: AgentRegistry
    notes: list[str] = field(default_factory=list)  # one line each, said once before the run
    by_id: dict[str, Case] = field(init=False, repr=False)  # built once: looked up per case
    _by_track: dict[str, list[Case]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.by_id = {}
        self._by_track = {}
        for c in self.cases:
            if c.id in self.by_id:
                raise InputError(f"case id {c.id!r} is not unique (agent names repeated?)")
            self.by_id[c.id] = c
            self._by_track.setdefault(c.track, []).append(c)

    def cases_of(self, track: str) -> list[Case]:
        return self._by_track.get(track, [])


def tracks_in(args: list[str], suites_root: Path) -> list[Path]:
    """Suite directories (children of suites/) that the pytest arguments point into."""
    found: dict[Path, None] = {}
    root = suites_root.resolve()
    for arg in args:
        p = Path(arg.split("::")[0]).resolve()
        if p == root:
            for child in sorted(root.iterdir()):
                if child.is_dir() and not child.name.startswith(("_", ".")):
                    found[child] = None
        elif root in p.parents:
            suite = root / p.relative_to(root).parts[0]
            if not suite.is_dir():
                known = sorted(c.name for c in root.iterdir() if (c / "track.toml").is_file())
                raise InputError(f"{arg}: {unknown_name('track', suite.name, known)}")
            found[suite] = None
    return list(found)


def default_backend(track: str) -> str:
    """The backend a track runs on when --backend is not given (suites/<track>/track.toml), "local"
    when the track sets none."""
    return load_track_config(SUITES_ROOT / track).default_backend


def run_backend(plan: Plan, explicit: str | None) -> str:
    """--backend when given, else the default backend of the tracks that have cases (of every
    selected track when none has); tracks with different defaults need an explicit --backend."""
    if explicit:
        return explicit
    tracks = [t for t in plan.tracks if plan.cases_of(t)] or list(plan.tracks)
    defaults = {t: default_backend(t) for t in tracks}
    if len(set(defaults.values())) > 1:
        which = ", ".join(f"{t} ({b})" for t, b in sorted(defaults.items()))
        raise InputError(
            f"--backend: the selected tracks run on different backends by default ({which}); "
            "pass --backend or run the tracks separately"
        )
    return next(iter(defaults.values()), "local")


def check_backend(plan: Plan, backend: str, hosts: list[str] | None = None) -> None:
    """Before any case, on the controller: the backend can run every task that has cases. A Docker
    engine that does not answer stops the run with one line naming the endpoint and, for tracks
    that need Docker, why; a task shipping no repository cannot run on the local backend."""
    tracks = [t for t in plan.tracks if plan.cases_of(t)]
    if not tracks:
        return
    configs = {t: load_track_config(SUITES_ROOT / t) for t in tracks}
    cls = backend_class(backend)
    try:
        cls.check_available(cls.hosts(hosts))
    except InputError as exc:
        needs = [
            f"track {t!r} needs {backend.capitalize()} "
            f"({c.backend_reason or f'its default backend is {backend}'})"
            for t, c in configs.items()
            if c.default_backend == backend
        ]
        raise InputError("; ".join([*needs, str(exc)])) from None
    tasks = {(c.track, c.task.id): c for c in plan.cases}  # one check per task, not per case
    for case in tasks.values():
        task = case.task
        if task.kind == "machine" and not cls.supports_machine_states:
            raise InputError(machine_refusal(backend, task))
        if task.repository_dir is None and cls.needs_task_repository:
            why = configs[case.track].backend_reason
            raise InputError(
                f"--backend {backend}: task {task.id} of track {case.track!r} ships no repository "
                f"({task.path / 'task.toml'} has no [metadata] repository_dir), so only Docker "
                f"can run it{f' ({why})' if why else ''}; use --backend docker"
            )


def no_tasks_reason(suite: Path) -> str:
    cfg = load_track_config(suite)
    track = suite.name
    if cfg.tasks_url or cfg.tasks_versions:
        return (
            f"no tasks for track {track!r}: fetch them with `swe-residual tasks fetch {track}` "
            f"(or pass --tasks-dir PATH; see {suite / 'README.md'})"
        )
    return (
        f"no tasks for track {track!r}: pass --tasks-dir PATH (see {suite / 'README.md'} for how to get them)"
    )


def no_states_reason(
    suite: Path, states_path: Path, left_out: list[ResidualState], where: str = "in --tasks-dir"
) -> str:
    track = suite.name
    others = [s for s in left_out if s.track == track]
    what = (
        f"states file {states_path} has no states of the tasks {where} (its {len(others)} states of "
        f"track {track!r} are of other tasks)"
        if others
        else f"states file {states_path} lists no states for track {track!r}"
    )
    readme = suite / "README.md"
    path = f" (the whole path: {readme})" if readme.is_file() else ""
    return (
        f"{what}: run `--start clean` for a clean-only baseline, install a states pack someone shared "
        f"with `swe-residual states fetch SOURCE --track {track}`, or build them from predecessor runs (`swe-residual residualize import --format FORMAT ... WORK` or "
        f"`residualize run --track {track} --predecessor AGENT WORK`, then `residualize filter WORK`, "
        f"`residualize review WORK --serve --reviewer NAME`, `residualize build WORK`) and pass "
        f"--states WORK/states/states.yaml{path}"
    )


def is_default_states(path: Path) -> bool:
    """Whether `path` is the project's own states.yaml (the default when no --states is given and
    no pack is installed)."""
    return Path(path).resolve() == BUNDLED_STATES.resolve()


def left_out_note(states_path: Path, tasks_dir: str, left_out: list[ResidualState]) -> str:
    """The one line saying which states of the default states file a --tasks-dir (or the fetched
    tasks, `tasks_dir` then saying so) left out."""
    by_task: dict[str, int] = {}
    for s in left_out:
        by_task[f"{s.track}/{s.task}"] = by_task.get(f"{s.track}/{s.task}", 0) + 1
    n = len(left_out)
    return (
        f"{n} state{'s' if n != 1 else ''} of the default states file {states_path} left out: their "
        f"task{'s are' if len(by_task) != 1 else ' is'} not in "
        f"{tasks_dir if tasks_dir.startswith('the fetched') else f'--tasks-dir {tasks_dir}'} "
        f"({names_list(by_task)}); pass --states FILE for states of these tasks"
    )


@dataclass(frozen=True)
class PlanRequest:
    """What a run asks for besides its tracks: agents (--agent), starts (--start), the states file,
    --tasks-dir, --agent-config files, --handoff-view views, --repeat (every case that many times,
    each on an independent instance). A states file given explicitly
    (--states, a fetched pack: anything but the project's own states.yaml unless `states_explicit`
    says so) must name only known tracks and tasks."""

    agents: list[str]
    start: str
    states_path: Path
    tasks_dir: str | None = None
    agent_configs: list[str] | None = None
    handoff_views: list[str] | None = None
    states_explicit: bool | None = None
    repeat: int = 1

    @property
    def explicit_states(self) -> bool:
        if self.states_explicit is not None:
            return self.states_explicit
        return not is_default_states(self.states_path)


def bundled_note(suite: Path) -> list[str]:
    """A track that ships demo tasks but publishes its real ones: say which ones this run uses."""
    cfg = load_track_config(suite)
    if not cfg.tasks_versions and not cfg.tasks_url:
        return []
    return [
        f"{suite.name}: running the tasks bundled in {suite / 'tasks'} (nothing fetched); the published "
        f"ones: `swe-residual tasks fetch {suite.name.replace('_', '-')}`, their states: "
        f"`swe-residual states fetch SOURCE --track {suite.name}`"
    ]


def build_plan(suite_dirs: list[Path], request: PlanRequest) -> Plan:
    """The cases of a run. An explicit states file must name only known tracks and tasks
    (PlanRequest); the project's states whose tasks a --tasks-dir does not hold are left out with
    one note. `--start clean` runs every task of a track, whether it has states or not (a
    clean-only baseline); the other starts run the tasks that have states."""
    agents, start, states_path, tasks_dir = (
        request.agents,
        request.start,
        request.states_path,
        request.tasks_dir,
    )
    if request.repeat < 1:
        raise InputError(f"--repeat: must be 1 or more (runs of every case), not {request.repeat}")
    registry = AgentRegistry([Path(p) for p in request.agent_configs or []])
    for name in agents:
        registry.get(name)  # unknown or misconfigured agents fail before anything runs
    tracks: dict[str, Track] = {}
    suites = {s.name: s for s in suite_dirs}
    fetched: list[str] = []  # tasks dirs a fetch put in the cache (not the bundled ones)
    notes: list[str] = []
    for suite in suite_dirs:
        tdir = tasks_dir_for(suite, tasks_dir)
        if tasks_dir is None and tdir is not None and tdir != suite / "tasks":
            fetched.append(str(tdir))
        elif tasks_dir is None and tdir is not None:
            notes.extend(bundled_note(suite))
        track = Track(name=suite.name, tasks_dir=tdir)
        if tdir is None:
            track.skip_reason = no_tasks_reason(suite)
        else:
            track.tasks = load_tasks(tdir, suite.name)
        tracks[suite.name] = track
    explicit = request.explicit_states
    states: list[LoadedState] = []
    left_out: list[ResidualState] = []
    if tracks and start != "clean":  # a clean-only run uses no state
        got = read_states(
            states_path,
            {t.name: t.tasks for t in tracks.values()},
            tracks={t.name for t in tracks.values() if t.skip_reason is None},
            known_tracks={*known_tracks(), *suites},
            missing_tasks="leave_out" if (tasks_dir or fetched) and not explicit else "error",
        )
        states, left_out = got.states, got.left_out
        if left_out:
            where = tasks_dir or f"the fetched tasks ({', '.join(fetched)})"
            notes.append(left_out_note(states_path, where, left_out))
    views = list(dict.fromkeys(request.handoff_views or []))
    if views and start != "clean":
        from swe_residual.run.handoff import read_trajectory

        for s in states:
            read_trajectory(s)  # every state can show its predecessor's trajectory, before any case
    cases: list[Case] = []
    for t in tracks.values():
        if start == "clean":
            cases.extend(
                Case(agent, t.tasks[task_id], "clean") for agent in agents for task_id in sorted(t.tasks)
            )
            continue
        t_states = [s for s in states if s.track == t.name]
        if t.tasks and not t_states and t.skip_reason is None:
            t.skip_reason = no_states_reason(
                suites[t.name],
                states_path,
                left_out,
                "in --tasks-dir" if tasks_dir else f"fetched into {t.tasks_dir}",
            )
        cases.extend(build_cases(agents, t.tasks, t_states, start, views))
    return Plan(
        tracks=tracks, states=states, cases=repeated(cases, request.repeat), registry=registry, notes=notes
    )


def repeated(cases: list[Case], k: int) -> list[Case]:
    """Every case k times: the whole list once per repeat (an interrupted run has its earlier
    repeats complete), each repeat its own case id and record (`repeat`)."""
    return cases + [replace(c, repeat=r) for r in range(2, k + 1) for c in cases]

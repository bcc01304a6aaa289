"""What a run will do: tracks, tasks, states, agents and the resulting cases.

Built identically on the pytest controller and on every xdist worker from the command line, so
case ids agree everywhere without sending objects between processes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from swe_residual.agents import AgentRegistry
from swe_residual.backends import backend_class
from swe_residual.backends.base import machine_refusal
from swe_residual.errors import InputError
from swe_residual.run.runner import Case, build_cases
from swe_residual.states import LoadedState, load_states
from swe_residual.tasks import Task, load_tasks
from swe_residual.tracks import SUITES_ROOT, load_track_config, tasks_dir_for


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
    by_id: dict[str, Case] = field(init=False, repr=False)        # built once: looked up per case
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
            found[root / p.relative_to(root).parts[0]] = None
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
        raise InputError(f"--backend: the selected tracks run on different backends by default ({which}); "
                         "pass --backend or run the tracks separately")
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
        needs = [f"track {t!r} needs {backend.capitalize()} "
                 f"({c.backend_reason or f'its default backend is {backend}'})"
                 for t, c in configs.items() if c.default_backend == backend]
        raise InputError("; ".join([*needs, str(exc)])) from None
    for case in plan.cases:
        task = case.task
        if task.kind == "machine" and not cls.supports_machine_states:
            raise InputError(machine_refusal(backend, task))
        if task.repository_dir is None and cls.needs_task_repository:
            why = configs[case.track].backend_reason
            raise InputError(f"--backend {backend}: task {task.id} of track {case.track!r} ships no repository "
                             f"({task.path / 'task.toml'} has no [metadata] repository_dir), so only Docker "
                             f"can run it{f' ({why})' if why else ''}; use --backend docker")


def _no_tasks_reason(suite: Path) -> str:
    cfg = load_track_config(suite)
    track = suite.name
    if cfg.tasks_url:
        return (f"no tasks for track {track!r}: fetch them with `swe-residual tasks fetch {track}` "
                f"(or pass --tasks-dir PATH; see {suite / 'README.md'})")
    return f"no tasks for track {track!r}: pass --tasks-dir PATH (see {suite / 'README.md'} for how to get them)"


def _no_states_reason(suite: Path, states_path: Path) -> str:
    track = suite.name
    return (f"states file {states_path} lists no states for track {track!r}: build them from predecessor runs "
            f"with `swe-residual residualize import --format harbor --track {track} JOB_DIR... WORK` "
            f"(or `swe-residual residualize run --track {track} --predecessor AGENT WORK`), then "
            f"`residualize filter WORK`, `residualize review WORK --serve`, "
            f"`residualize build WORK --states suites/{track}/states.yaml`, and pass --states "
            f"suites/{track}/states.yaml "
            f"(see {suite / 'README.md'})")


def build_plan(suite_dirs: list[Path], *, agents: list[str], start: str, states_path: Path,
               tasks_dir: str | None = None, agent_configs: list[str] | None = None,
               handoff_views: list[str] | None = None) -> Plan:
    registry = AgentRegistry([Path(p) for p in agent_configs or []])
    for name in agents:
        registry.get(name)  # unknown or misconfigured agents fail before anything runs
    tracks: dict[str, Track] = {}
    suites = {s.name: s for s in suite_dirs}
    for suite in suite_dirs:
        tdir = tasks_dir_for(suite, tasks_dir)
        track = Track(name=suite.name, tasks_dir=tdir)
        if tdir is None:
            track.skip_reason = _no_tasks_reason(suite)
        else:
            track.tasks = load_tasks(tdir, suite.name)
        tracks[suite.name] = track
    states: list[LoadedState] = []
    if tracks:
        states = load_states(states_path, {t.name: t.tasks for t in tracks.values()},
                             tracks={t.name for t in tracks.values() if t.skip_reason is None})
    views = list(dict.fromkeys(handoff_views or []))
    if views and start != "clean":
        from swe_residual.run.handoff import read_trajectory
        for s in states:
            read_trajectory(s)      # every state can show its predecessor's trajectory, before any case
    cases: list[Case] = []
    for t in tracks.values():
        t_states = [s for s in states if s.track == t.name]
        if t.tasks and not t_states and t.skip_reason is None:
            t.skip_reason = _no_states_reason(suites[t.name], states_path)
        cases.extend(build_cases(agents, t.tasks, t_states, start, views))
    return Plan(tracks=tracks, states=states, cases=cases, registry=registry)

"""The run page (report.html) and the case browser (pages/<case>.html) of a run dir.

The run page starts with Table 3 and a task x agent grid of clean and residual outcomes (each
cell a link to its case page), then the case list (sortable, filtered by agent, task, start,
outcome, rule and flag, searchable), the states that hurt most (by Gap across agents), the
figures, the other tables and the environment last. Per-case content lives only on the case
pages, so a 10k-case run page stays small (the case list is a compact JSON block the page's
own script draws). Pages are rewritten in place and whatever
else pages/ holds is removed (no stale page survives a rerun). A suite run writes them at the
end (plugins/controller.py); `swe-residual report RUN_DIR --html` writes them for any run dir.

run-info.json, written by a suite run, keeps what the run dir would otherwise lack for offline
pages: the environment block and each task's request (instruction.md).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from swe_residual.redact import redact, secret_values
from swe_residual.report.html.case_page import SYMBOL, WORD, CaseInputs, outcome_class, render_case
from swe_residual.report.html.kit import esc, figure, forget_paths, page, read_text, report_table, table
from swe_residual.results import RUN_PAGE, Manifest, RunRecords

if TYPE_CHECKING:
    from swe_residual.report.aggregates import StateHarm

PAGES = "pages"
RUN_INFO = "run-info.json"
REQUEST_LIMIT = 256 << 10  # bytes of one instruction.md kept and shown
RUN_INFO_LIMIT = 64 << 20
LIST_LIMIT = 200  # rows of each problem list on the run page


# -- run-info.json ----------------------------------------------------------------------------------


@dataclass
class RunInfo:
    """What a suite run saves for offline pages: {name: value} of its environment, {track/task: request}."""

    environment: dict[str, str] = field(default_factory=dict)
    requests: dict[str, str] = field(default_factory=dict)


def read_run_info(run_dir: Path | str) -> RunInfo:
    """The run dir's run-info.json; empty when absent or not of the expected shape (it is only shown)."""
    root = os.path.realpath(run_dir)
    t = read_text(os.path.join(root, RUN_INFO), [root], RUN_INFO_LIMIT)
    if t.text is None or t.truncated:
        return RunInfo()
    try:
        data = json.loads(t.text)
    except ValueError:
        return RunInfo()
    if not isinstance(data, dict):
        return RunInfo()

    def strings(v: Any) -> dict[str, str]:
        return {str(k): str(x) for k, x in v.items()} if isinstance(v, dict) else {}

    return RunInfo(strings(data.get("environment")), strings(data.get("requests")))


def write_run_info(run_dir: Path | str, info: RunInfo) -> None:
    """Save run-info.json; requests of an earlier session of the run (--resume) are kept."""
    old = read_run_info(run_dir)
    requests = {**old.requests, **{k: v[:REQUEST_LIMIT] for k, v in info.requests.items()}}
    path = Path(run_dir) / RUN_INFO
    tmp = path.with_name(RUN_INFO + ".tmp")
    tmp.write_text(
        redact(json.dumps({"environment": info.environment, "requests": requests}, indent=1)),
        encoding="utf-8",
    )
    tmp.replace(path)


def task_requests(tasks: Iterable[Any]) -> dict[str, str]:
    """{track/task: the request} of loaded tasks (swe_residual.tasks.Task), each bounded in size."""
    out = {}
    for t in tasks:
        root = os.path.realpath(t.path)
        text = read_text(os.path.join(root, "instruction.md"), [root], REQUEST_LIMIT).text
        if text is not None:
            out[f"{t.track}/{t.id}"] = text
    return out


_SAFE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


def find_requests(keys: Iterable[str], found: Mapping[str, str]) -> dict[str, str]:
    """{track/task: request}: those in `found` (run-info.json), else the instruction.md of the task
    dir the track resolves today (bundled or fetched tasks; task dir named like the task)."""
    from swe_residual.errors import InputError
    from swe_residual.tracks import SUITES_ROOT, tasks_dir_for

    out: dict[str, str] = {}
    dirs: dict[str, Path | None] = {}
    for key in keys:
        if key in found:
            out[key] = found[key]
            continue
        track, _, task = key.partition("/")
        if not (_SAFE.fullmatch(track) and _SAFE.fullmatch(task)) or not (SUITES_ROOT / track).is_dir():
            continue
        if track not in dirs:
            try:
                dirs[track] = tasks_dir_for(SUITES_ROOT / track, None)
            except (InputError, OSError, ValueError):  # a broken track.toml: the request is just not shown
                dirs[track] = None
        base = dirs[track]
        if base is not None:
            root = os.path.realpath(base)
            t = read_text(os.path.join(root, task, "instruction.md"), [root], REQUEST_LIMIT)
            if t.text is not None:
                out[key] = t.text
    return out


# -- the grid ---------------------------------------------------------------------------------------


def page_name(case_id: str) -> str:
    """The case page's file name: the case id where it is a plain name, else its first 100 safe
    characters and a hash (a `_` in front only where they would start with `.` or `-`)."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", case_id)[:100]
    if name != case_id or not _SAFE.fullmatch(name):
        stem = name.lstrip(".")
        lead = "" if stem[:1].isascii() and stem[:1].isalnum() else "_"
        name = lead + stem + "-" + hashlib.sha1(case_id.encode("utf-8", "replace")).hexdigest()[:12]
    return name + ".html"


@dataclass
class Cell:
    case_id: str
    records: list[Any]
    label: str

    @property
    def cls(self) -> str:
        return outcome_class(self.records) if self.records else "n"

    @property
    def flagged(self) -> bool:
        return any(r.integrity for r in self.records if r.valid)

    def html(self, prefix: str, current: str | None = None) -> str:
        cls = self.cls
        ys = [r.outcome for r in self.records if r.valid]
        word = f"{sum(ys)}/{len(ys)} passed" if cls == "m" else WORD[cls]
        extra = (" fl" if self.flagged else "") + (" cur" if self.case_id == current else "")
        title = esc(f"{self.label}: {word}" + (" (integrity flags)" if self.flagged else ""))
        if not self.records:
            return f'<span class="o n" title="{title}">{SYMBOL["n"]}</span>'
        return (
            f'<a class="o {cls}{extra}" href="{prefix}{esc(page_name(self.case_id))}" '
            f'title="{title}">{SYMBOL[cls]}</a>'
        )


@dataclass
class TaskRow:
    track: str
    task: str
    states: list[str]
    cells: dict[str, tuple[Cell | None, list[Cell | None]]] = field(default_factory=dict)

    @property
    def differs(self) -> bool:
        """Some agent's clean and residual outcomes differ (pass on one start, fail on the other)."""
        for clean, res in self.cells.values():
            seen = {c.cls for c in [clean, *res] if c is not None and c.cls in "pfm"}
            if len(seen) > 1:
                return True
        return False

    @property
    def flagged(self) -> bool:
        return any(c.flagged for clean, res in self.cells.values() for c in [clean, *res] if c is not None)


@dataclass
class Grid:
    agents: list[str]
    rows: list[TaskRow]
    by_case: dict[str, list[Any]]  # case id -> records in file order
    unplaced: list[str]  # manifest cases without a record that no row names


def build_grid(records: Sequence[Any], manifest: Manifest) -> Grid:
    by_case: dict[str, list[Any]] = {}
    for r in records:
        by_case.setdefault(r.case_id, []).append(r)
    agents = sorted({r.agent for r in records})
    states: dict[tuple[str, str], set[str]] = {}
    for key in manifest.tasks:
        track, _, task = key.partition("/")
        states.setdefault((track, task), set())
    for sid, st in manifest.states.items():
        states.setdefault((st.track, st.task), set()).add(sid)
    for r in records:
        s = states.setdefault((r.track, r.task), set())
        if r.start == "residual" and r.state:
            s.add(r.state)
    ids: dict[tuple, str] = {}  # (agent, track, task, state or None) -> case id of its records
    for cid, recs in by_case.items():
        r = recs[0]
        ids[(r.agent, r.track, r.task, r.state if r.start == "residual" else None)] = cid
    expected = set(manifest.cases) - set(by_case)
    agents = sorted(set(agents) | _agents_of(expected, states))
    placed: set[str] = set()
    rows = []
    for (track, task), sids in sorted(states.items()):
        row = TaskRow(track, task, sorted(sids))
        for agent in agents:
            row.cells[agent] = (
                _cell(ids, by_case, expected, placed, agent, track, task, None),
                [_cell(ids, by_case, expected, placed, agent, track, task, s) for s in row.states],
            )
        if any(c is not None for clean, res in row.cells.values() for c in [clean, *res]):
            rows.append(row)
    return Grid(agents, rows, by_case, sorted(expected - placed))


def _agents_of(case_ids: Iterable[str], states: Mapping[tuple[str, str], set[str]]) -> set[str]:
    """Agent labels of case ids without records (`<agent>-<task>-clean`, `<agent>-<task>-residual-<state>`),
    so an agent none of whose cases ran still gets its column of not-run marks."""
    suffixes = set()
    for (_, task), sids in states.items():
        suffixes.add(f"-{task}-clean")
        suffixes.update(f"-{task}-residual-{sid}" for sid in sids)
    found = set()
    for cid in case_ids:
        at = cid.find("-", 1)
        while at > 0:
            if cid[at:] in suffixes:
                found.add(cid[:at])
                break
            at = cid.find("-", at + 1)
    return found


def _cell(
    ids: dict,
    by_case: dict,
    expected: set[str],
    placed: set[str],
    agent: str,
    track: str,
    task: str,
    state: str | None,
) -> Cell | None:
    """The grid cell of one (agent, task, start/state): its records, or a manifest case not run yet."""
    cid = ids.get((agent, track, task, state))
    # the row names the task: a state id starting with it is shown without it
    label = "clean" if state is None else f"residual {state.removeprefix(task + '--')}"
    if cid is not None:
        return Cell(cid, by_case[cid], label)
    guess = f"{agent}-{task}-clean" if state is None else f"{agent}-{task}-residual-{state}"
    if guess in expected:
        placed.add(guess)
        return Cell(guess, [], label)
    return None


def _row_pieces(grid: Grid, row: TaskRow, prefix: str) -> tuple[list[str], dict[str, tuple[int, Cell]]]:
    """A task's row as HTML pieces, and where each case's mark is (to highlight one cheaply)."""
    attrs = (' data-d="1"' if row.differs else "") + (' data-f="1"' if row.flagged else "")
    pieces = [f'<tr{attrs}><td class="t">{esc(row.track)}/<b>{esc(row.task)}</b></td>']
    where: dict[str, tuple[int, Cell]] = {}

    def mark(c: Cell) -> None:
        where[c.case_id] = (len(pieces), c)
        pieces.append(c.html(prefix))

    for agent in grid.agents:
        clean, res = row.cells.get(agent, (None, []))
        pieces.append("<td>")
        if clean:
            mark(clean)
        pieces.append("</td><td>")
        if any(res):  # a blank mark keeps the state order where one state was not selected
            for c in res:
                if c:
                    mark(c)
                else:
                    pieces.append('<span class="o"></span>')
        pieces.append("</td>")
    pieces.append("</tr>")
    return pieces, where


def row_html(grid: Grid, row: TaskRow, prefix: str) -> str:
    """One task's row of the grid."""
    return "".join(_row_pieces(grid, row, prefix)[0])


class TaskRowTable:
    """The small table a case page shows: its task's row, its own mark highlighted."""

    def __init__(self, grid: Grid, row: TaskRow):
        self.pieces, self.where = _row_pieces(grid, row, "")
        states = " ".join(f"{i + 1}: {s}" for i, s in enumerate(row.states))
        self.head = f'<table class="grid">{_grid_head(grid)}<tbody>'
        self.tail = (
            f'</tbody></table><p class="mute small">Residual states in order: {esc(states or "none")}.</p>'
        )

    def html(self, current: str) -> str:
        pieces = self.pieces
        if current in self.where:
            i, cell = self.where[current]
            pieces = [*pieces[:i], cell.html("", current), *pieces[i + 1 :]]
        return self.head + "".join(pieces) + self.tail


def _grid_head(grid: Grid) -> str:
    top = "".join(f'<th colspan="2">{esc(a)}</th>' for a in grid.agents)
    sub = "".join("<th>clean</th><th>residual</th>" for _ in grid.agents)
    return f'<thead><tr><th rowspan="2">task</th>{top}</tr><tr>{sub}</tr></thead>'


GRID_SCRIPT = (
    "(function(){var q=document.getElementById('gq'),d=document.getElementById('gd'),"
    "f=document.getElementById('gf'),n=document.getElementById('gn'),"
    "rows=document.querySelectorAll('#grid tbody tr');"
    "function u(){var s=q.value.toLowerCase(),k=0;for(var i=0;i<rows.length;i++){var r=rows[i],"
    "ok=(!s||r.cells[0].textContent.toLowerCase().indexOf(s)>=0)&&(!d.checked||r.hasAttribute('data-d'))"
    "&&(!f.checked||r.hasAttribute('data-f'));r.hidden=!ok;if(ok)k++}"
    "n.textContent=k+' of '+rows.length+' tasks shown'}"
    "q.addEventListener('input',u);d.addEventListener('change',u);f.addEventListener('change',u);u()})();"
)


def grid_html(grid: Grid) -> str:
    legend = " ".join(f'<span class="o {c}">{SYMBOL[c]}</span> {esc(WORD[c])}' for c in "pfmin")
    rows = "".join(row_html(grid, row, PAGES + "/") for row in grid.rows)
    return (
        f'<h2 id="cases">Cases: task \u00d7 agent</h2>'
        f'<div class="legend">{legend} <span class="o p fl">{SYMBOL["p"]}</span> integrity flags. '
        "Each residual cell holds one mark per state, in the task's state order; hover for the state, "
        "click for the case page.</div>"
        '<div class="filters"><input id="gq" type="search" placeholder="filter tasks">'
        '<label><input id="gd" type="checkbox"> only tasks where an agent\'s clean and residual outcomes differ'
        '</label><label><input id="gf" type="checkbox"> only tasks with integrity flags</label>'
        '<span id="gn" class="mute"></span></div>'
        f'<div class="wrap"><table class="grid" id="grid">{_grid_head(grid)}<tbody>{rows}</tbody></table></div>'
    )


# -- the case list ----------------------------------------------------------------------------------


def _flag_kind(flag: str) -> str:
    return flag.split(":", 1)[0].strip()


def _page_ref(case_id: str) -> str | int:
    """How the case list names a case's page: 0 for `<case id>.html`, `#<hash>` for the hashed
    name page_name() gives a long or unusual id (the script rebuilds the rest), else the name."""
    name = page_name(case_id)
    if name == case_id + ".html":
        return 0
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", case_id)[:100].lstrip(".")
    lead = "" if stem[:1].isascii() and stem[:1].isalnum() else "_"
    digest = name[len(lead + stem) + 1 : -len(".html")]
    return "#" + digest if name == f"{lead}{stem}-{digest}.html" and len(digest) == 12 else name


def case_list_data(grid: Grid) -> dict[str, Any]:
    """Every case as one compact row for the page's case list (kept small: a 10k-case run page
    carries 10k of them). Names are indexes into the lists; a case id (and page name) is left
    out where the script can rebuild it from agent, task and state."""
    lists: dict[str, dict[str, int]] = {
        k: {} for k in ("agents", "tasks", "states", "starts", "rules", "flags", "nodes")
    }

    def ix(kind: str, value: str) -> int:
        return lists[kind].setdefault(value, len(lists[kind]))

    rows = []
    shown_states: set[tuple[str, str]] = set()
    for cid, recs in sorted(grid.by_case.items()):
        r = _primary(recs)
        state = r.state if r.start != "clean" else None
        if state is not None:
            shown_states.add((r.task, state))
        standard = f"{r.agent}-{r.task}-clean" if state is None else f"{r.agent}-{r.task}-residual-{state}"
        name = _page_ref(cid)
        flags = sorted({_flag_kind(f) for x in recs if x.valid for f in (x.integrity or [])})
        rows.append(
            [
                ix("agents", r.agent),
                ix("tasks", f"{r.track}/{r.task}"),
                -1 if state is None else ix("states", state),
                ix("starts", r.start),
                outcome_class(recs),
                ix("rules", r.rule or r.verdict or "n/a"),
                [ix("flags", f) for f in flags],
                r.steps,
                None if r.duration_s is None else round(r.duration_s, 1),
                0 if cid == standard else cid,
                name,
                -1 if not r.node else ix("nodes", r.node),  # a cluster run: the node of the shown attempt
            ]
        )
    tasks_of = {state: task for task, state in shown_states}
    short = [short_state(tasks_of[s], s) for s in lists["states"]]
    return {**{k: list(v) for k, v in lists.items()}, "short": short, "words": WORD, "rows": rows}


def short_state(task: str, state: str) -> str:
    """A state's name without what repeats its task's: the `<task>--` prefix, and a trial name's
    truncated copy of the task name (DeepSWE: `<task>--<task, cut>__<trial>` -> `<trial>`)."""
    rest = state.removeprefix(task + "--")
    head, sep, tail = rest.partition("__")
    if sep and tail and len(head) >= 8 and task.startswith(head):
        return tail
    return rest


def _json_block(element_id: str, data: Any) -> str:
    """Data for the page's script in a non-executed block: `<` written as \\u003c, so no text
    in it can end the element."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":")).replace("<", "\\u003c")
    return f'<script type="application/json" id="{esc(element_id)}">{text}</script>'


LIST_SHOWN = 500  # case list rows shown at once (the filters narrow the rest)
LIST_COLUMNS = (
    ("case", "case"),
    ("agent", "agent"),
    ("task", "task"),
    ("start", "start"),
    ("state", "state"),
    ("outcome", "outcome"),
    ("rule", "rule"),
    ("flags", "integrity flags"),
    ("steps", "steps"),
    ("time", "time (s)"),
)

LIST_SCRIPT = (
    "(function(){var el=function(i){return document.getElementById(i)},D=JSON.parse(el('case-data').textContent),"
    "body=el('cl-body'),n=el('cl-n'),q=el('cl-q'),F={agent:el('cl-agent'),task:el('cl-task'),start:el('cl-start'),"
    "outcome:el('cl-outcome'),rule:el('cl-rule'),flag:el('cl-flag')},key='task',dir=1,MAX="
    + str(LIST_SHOWN)
    + ";"
    "var R=D.rows.map(function(r){var a=D.agents[r[0]],t=D.tasks[r[1]],s=r[2]<0?'':D.states[r[2]],"
    "task=t.slice(t.indexOf('/')+1),id=r[9]||(a+'-'+task+(r[2]<0?'-clean':'-residual-'+s));"
    "var st=id.replace(/[^A-Za-z0-9_.-]+/g,'_').slice(0,100).replace(/^\\.+/,''),"
    "p=r[10]===0?id+'.html':r[10].charAt(0)==='#'?(/^[A-Za-z0-9]/.test(st)?'':'_')+st+'-'+r[10].slice(1)+'.html'"
    ":r[10];"
    "return {id:id,page:p,agent:a,task:t,state:s,short:r[2]<0?'':D.short[r[2]],start:D.starts[r[3]],outcome:r[4],"
    "rule:D.rules[r[5]],flags:r[6].map(function(i){return D.flags[i]}),steps:r[7],time:r[8],"
    "node:r[11]<0?'':D.nodes[r[11]]}});"
    "function opts(sel,values,label){values.slice().sort().forEach(function(v){var o=document.createElement('option');"
    "o.value=v;o.textContent=label?label(v):v;sel.appendChild(o)})}"
    "opts(F.agent,D.agents);opts(F.task,D.tasks);opts(F.start,D.starts);opts(F.rule,D.rules);"
    "opts(F.outcome,Object.keys(D.words),function(v){return D.words[v]});"
    "['(none)'].concat(D.flags).forEach(function(v,i){var o=document.createElement('option');o.value=i?v:'-';"
    "o.textContent=i?v:'no flag';F.flag.appendChild(o)});"
    "function ok(c){var s=q.value.toLowerCase();if(s&&(c.id+' '+c.task+' '+c.state+' '+c.node).toLowerCase()"
    ".indexOf(s)<0)"
    "return false;if(F.agent.value&&c.agent!==F.agent.value)return false;if(F.task.value&&c.task!==F.task.value)"
    "return false;if(F.start.value&&c.start!==F.start.value)return false;if(F.outcome.value&&c.outcome!=="
    "F.outcome.value)return false;if(F.rule.value&&c.rule!==F.rule.value)return false;var f=F.flag.value;"
    "if(f==='*')return c.flags.length>0;if(f==='-')return c.flags.length===0;return !f||c.flags.indexOf(f)>=0}"
    "function val(c,k){var v=k==='case'?c.id:k==='flags'?c.flags.join(' '):c[k];return v===null||v===undefined?"
    "'':v}"
    "function cmp(a,b){var x=val(a,key),y=val(b,key);if(typeof x==='number'&&typeof y==='number')return (x-y)*dir;"
    "x=String(x);y=String(y);return (x<y?-1:x>y?1:(a.id<b.id?-1:a.id>b.id?1:0))*dir}"
    "function td(tr,text,cls){var c=tr.insertCell();if(cls)c.className=cls;c.textContent=text;return c}"
    "function draw(){var m=R.filter(ok).sort(cmp);body.textContent='';m.slice(0,MAX).forEach(function(c){"
    "var tr=body.insertRow(),a=document.createElement('a');a.href='" + PAGES + "/'+c.page;a.textContent=c.id;"
    "a.title=c.id;var k=tr.insertCell();k.className='long';k.appendChild(a);td(tr,c.agent,'long').title=c.agent;"
    "td(tr,c.task,'long').title=c.task;td(tr,c.start);td(tr,c.short,'long').title=c.state;"
    "var o=td(tr,'');var v=document.createElement('span');v.className='v '+c.outcome;v.textContent=D.words[c.outcome];"
    "o.appendChild(v);td(tr,c.rule);td(tr,c.flags.join(', '));td(tr,c.steps===null?'':c.steps,'num');"
    "td(tr,c.time===null?'':c.time,'num');if(D.nodes.length)td(tr,c.node)});"
    "n.textContent=m.length+' of '+R.length+' cases'+(m.length>MAX?' match; the first '+MAX+' are shown':'');"
    "document.querySelectorAll('#cl-table th[data-k]').forEach(function(th){th.setAttribute('aria-sort',"
    "th.getAttribute('data-k')===key?(dir>0?'ascending':'descending'):'none')})}"
    "document.querySelectorAll('#cl-table th[data-k]').forEach(function(th){th.addEventListener('click',function(){"
    "var k=th.getAttribute('data-k');if(k===key)dir=-dir;else{key=k;dir=1}draw()})});"
    "q.addEventListener('input',draw);Object.keys(F).forEach(function(k){F[k].addEventListener('change',draw)});"
    "el('cl-table').hidden=false;el('cl-noscript').hidden=true;draw()})();"
)


def case_list_html(grid: Grid) -> str:
    """The case list: one row per case, sortable by every column (click its head), filtered by
    agent, task, start, outcome, rule and integrity flag, searchable by case id, task, state and
    (a cluster run) node.
    The rows are drawn by the page's own script from a JSON block (the CSP allows that script)."""
    data = case_list_data(grid)
    columns = LIST_COLUMNS + ((("node", "node"),) if data["nodes"] else ())  # a cluster run's cases
    heads = "".join(f'<th data-k="{k}" role="button" title="sort">{esc(label)}</th>' for k, label in columns)
    selects = "".join(
        f'<label>{esc(label)} <select id="cl-{k}"><option value="">all</option>{extra}</select></label>'
        for k, label, extra in (
            ("agent", "agent", ""),
            ("task", "task", ""),
            ("start", "start", ""),
            ("outcome", "outcome", ""),
            ("rule", "rule", ""),
            ("flag", "flag", '<option value="*">any flag</option>'),
        )
    )
    return (
        '<h2 id="case-list">Case list</h2>'
        '<p class="mute small">Every case: click a column head to sort (again: reverse), pick filters, or search '
        "case ids, tasks and states. <code>rule</code> is the error-table rule that decided the record "
        "(docs/errors.md).</p>"
        f'<div class="filters"><input id="cl-q" type="search" placeholder="search cases">{selects}'
        '<span id="cl-n" class="mute"></span></div>'
        '<p id="cl-noscript" class="mute">The list needs the page\'s script; the grid above links every case.</p>'
        f'<div class="scroll"><table id="cl-table" class="cases" hidden><thead><tr>{heads}</tr></thead>'
        '<tbody id="cl-body"></tbody></table></div>' + _json_block("case-data", data)
    )


# -- the states that hurt most --------------------------------------------------------------------


def reference_agents(records: Iterable[Any]) -> frozenset[str]:
    """The reference agents (nop, oracle: the built-in harness) among the records' agents."""
    return frozenset(r.agent for r in records if r.harness == "builtin")


def state_harm(records: Iterable[Any], exclude: frozenset[str] = frozenset()) -> list[StateHarm]:
    """Per Residual State, over the agents that ran both its task's clean start and the state (but
    `exclude`, the reference agents on the run page): mean clean success, mean residual success
    and their difference (points), largest first; from Table 3's computation of the records
    (report/aggregates.py Success.state_harm)."""
    from swe_residual.report.aggregates import success_of

    return success_of(records).state_harm(exclude)


def harm_html(harm: list[StateHarm]) -> str:
    if not harm:
        return (
            '<h2 id="hurt">States that hurt most</h2><p class="mute">No state has both a clean and a residual '
            "run of the same agent under evaluation (the reference agents nop and oracle are left out).</p>"
        )
    rows = []
    for h in harm[:LIST_LIMIT]:
        short = short_state(h.task, h.state)
        # a Gap is a loss: red and strong when the state hurt, never the green of a table's best value
        gap = (
            f'<td class="num exitn"><strong>{h.gap:.1f}</strong></td>'
            if h.gap > 0
            else f'<td class="num">{h.gap:.1f}</td>'
        )
        rows.append(
            f'<tr><td class="long" title="{esc(h.state)}"><code>{esc(short)}</code></td><td>{esc(h.track)}/{esc(h.task)}</td>'
            f'<td class="num">{100 * h.clean:.1f}</td><td class="num">{100 * h.residual:.1f}</td>'
            f"{gap}<td>{esc(', '.join(sorted(h.agents)))}</td></tr>"
        )
    more = (
        f'<p class="mute small">... and {len(harm) - LIST_LIMIT} more states (smaller Gap).</p>'
        if len(harm) > LIST_LIMIT
        else ""
    )
    return (
        '<h2 id="hurt">States that hurt most</h2><p class="mute small">Per Residual State, over the agents under '
        "evaluation that ran both its task's Clean Start and the state (the reference agents nop and oracle "
        "left out): their mean clean success on the task, their mean residual success from the state, and the "
        "difference (Gap, points), largest first.</p>"
        + table(
            ["state", "task", "Clean (%)", "Residual (%)", "Gap (pts)", "agents"], rows, ' id="hurt-table"'
        )
        + more
    )


# -- the run page ------------------------------------------------------------------------------------


def _figures(report: dict) -> str:
    from swe_residual.report.figures import figure_conditional, figure_success

    out = [
        figure(title, svg)
        for title, svg in (
            ("Figure 1 - Clean vs Residual success per agent", figure_success(report)),
            ("Figure 2 - Residual outcomes on Clean Start successes", figure_conditional(report)),
        )
        if svg
    ]
    return '<div class="figs">' + "".join(out) + "</div>" if out else ""


def _case_list(title: str, anchor: str, cells: list[tuple[str, str]], prefix: str) -> str:
    if not cells:
        return ""
    items = "".join(
        f'<li><a href="{prefix}{esc(page_name(cid))}">{esc(cid)}</a> <span class="mute">{esc(why)}</span></li>'
        for cid, why in cells[:LIST_LIMIT]
    )
    more = f"<li>... and {len(cells) - LIST_LIMIT} more</li>" if len(cells) > LIST_LIMIT else ""
    return f'<h3 id="{anchor}">{esc(title)} ({len(cells)})</h3><ul>{items}{more}</ul>'


def run_page(
    report: dict, grid: Grid, environment: Mapping[str, str], title: str, harm: list[StateHarm]
) -> str:
    from swe_residual.report.spend import cost_text
    from swe_residual.report.tables import all_tables, figures_absent_reason, interrupted_lines

    n_records = sum(map(len, grid.by_case.values()))
    infra = [
        (cid, recs[-1].rule or recs[-1].verdict)
        for cid, recs in sorted(grid.by_case.items())
        if not any(r.valid for r in recs)
    ]
    flagged = [
        (cid, "; ".join(next(r for r in reversed(recs) if r.valid and r.integrity).integrity))
        for cid, recs in sorted(grid.by_case.items())
        if any(r.valid and r.integrity for r in recs)
    ]
    cases = report.get("cases") or {}
    missing = cases.get("missing")
    n_missing = (
        len(missing)
        if isinstance(missing, list)
        else sum(
            1
            for row in grid.rows
            for clean, res in row.cells.values()
            for c in [clean, *res]
            if c is not None and not c.records
        )
        + len(grid.unplaced)
    )
    stopped_at = report.get("interrupted")
    kpis: list[tuple[str, int | str]] = [
        ("records", n_records),
        ("cases with records", len(grid.by_case)),
        # an interrupted run misses no case: those it did not reach are "not run"
        ("not run (interrupted)", stopped_at.get("not_run", 0))
        if isinstance(stopped_at, dict)
        else ("missing cases", n_missing),
        ("no valid verdict", len(infra)),
        ("integrity-flagged", len(flagged)),
        ("tasks", len(grid.rows)),
        ("agents", len(grid.agents)),
    ]
    spent = (report.get("cost") or {}).get("total_usd")
    if spent:  # "unknown" too: a run whose spend is not known never reads $0
        kpis.append(("model cost", cost_text(spent)))
    gates = report.get("gates")
    if isinstance(gates, dict):
        kpis.append(("gates", "passed" if not gates.get("status") else f"failed ({gates.get('status')})"))
    tables = all_tables(report)
    nav = (
        '<nav class="top"><a href="#tables">Table 3</a><a href="#cases">grid</a><a href="#case-list">case list</a>'
        '<a href="#hurt">states that hurt most</a><a href="#figures">figures</a><a href="#more-tables">more tables</a>'
        '<a href="#problems">problems</a><a href="#environment">environment</a></nav>'
    )
    body = [
        nav,
        f"<h1>SWE-Residual run <code>{esc(title)}</code></h1>",
        '<div class="kpis">'
        + "".join(f'<div class="kpi"><b>{esc(v)}</b>{esc(k)}</div>' for k, v in kpis)
        + "</div>",
    ]
    if isinstance(gates, dict) and gates.get("violations"):
        body.append(
            '<div class="warn">' + "<br>".join(f"GATE: {esc(v)}" for v in gates["violations"]) + "</div>"
        )
    stopped = interrupted_lines(report)  # Ctrl-C: the counts and the command that completes the run
    if stopped:
        body.append(
            '<div class="warn" id="interrupted"><b>Interrupted run.</b> '
            + "<br>".join(map(esc, stopped))
            + "</div>"
        )
    # what a reader needs first: the headline table and every case; the rest below
    body.append(
        '<div class="swe-residual-report"><h2 id="tables">Success by agent</h2>'
        + report_table(tables[0])
        + "</div>"
    )
    body.append(grid_html(grid))
    body.append(case_list_html(grid))
    body.append(harm_html(harm))
    body.append(
        '<div class="swe-residual-report"><h2 id="figures">Figures</h2>'
        + (_figures(report) or f'<p class="mute">No figure: {esc(figures_absent_reason(report))}.</p>')
    )
    body.append(
        '<h2 id="more-tables">More tables</h2>' + "".join(report_table(t) for t in tables[1:]) + "</div>"
    )
    problems = _case_list("Cases without a valid verdict", "infra", infra, PAGES + "/") + _case_list(
        "Runs with integrity flags", "flagged", flagged, PAGES + "/"
    )
    missing_ids = missing if isinstance(missing, list) else grid.unplaced
    if missing_ids:
        problems += (
            f'<h3 id="missing">Missing cases ({len(missing_ids)})</h3><p class="mute small">'
            + esc(", ".join(map(str, missing_ids[:LIST_LIMIT])))
            + ("..." if len(missing_ids) > LIST_LIMIT else "")
            + "</p>"
        )
    body.append(
        '<h2 id="problems">Problems</h2>'
        + (problems or '<p class="mute">None: every case has a valid verdict and no run is flagged.</p>')
    )
    env_rows = [f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in environment.items()]
    body.append(
        '<h2 id="environment">Environment</h2>'
        + (
            table((), env_rows, ' class="env"')
            if env_rows
            else '<p class="mute">Not recorded (run-info.json is written by suite runs).</p>'
        )
    )
    body.append(
        f'<p class="mute small">Generated {esc(time.strftime("%Y-%m-%d %H:%M:%S"))} by SWE-Residual.</p>'
    )
    return page(f"SWE-Residual run {title}", "".join(body), script=GRID_SCRIPT + LIST_SCRIPT)


# -- writing -----------------------------------------------------------------------------------------


@dataclass
class Written:
    run_page: Path
    pages_dir: Path
    n_pages: int
    run_page_bytes: int
    seconds: float


def _primary(recs: list[Any]) -> Any:
    valid = [r for r in recs if r.valid]
    return (valid or recs)[-1]


def write_browser(
    out_dir: Path | str,
    report: dict,
    records: Iterable[Any],
    manifest: Manifest,
    run_dirs: Sequence[Path | str],
    info: RunInfo | None = None,
) -> Written:
    """Write <out_dir>/report.html and <out_dir>/pages/<case>.html for the records of run_dirs.

    records: load_runs' records (RunRecords rows are read as they are) with absolute artifact
    paths; manifest: load_runs' merged manifest (absolute patch paths); info: run-info.json
    contents (default: those of the run dirs, merged)."""
    from swe_residual.report.aggregates import success_of

    t0 = time.perf_counter()
    forget_paths()  # directories resolved by an earlier call may have changed since
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if isinstance(records, RunRecords):  # load_runs' rows, as they are
        success = success_of(records)  # first: the numbers its report computed, or its own columns
        recs = list(records.rows)
    else:
        recs = list(records)
        success = success_of(recs)
    harm = success.state_harm(reference_agents(recs))
    roots = [os.path.realpath(d) for d in run_dirs]
    if info is None:
        info = RunInfo()
        for d in run_dirs:
            got = read_run_info(d)
            info.environment = info.environment or got.environment
            info.requests = {**got.requests, **info.requests}
    grid = build_grid(recs, manifest)
    requests = find_requests({f"{r.track}/{r.task}" for r in recs}, info.requests)
    pages = out / PAGES
    _pages_dir(pages)
    names = _write_cases(pages, str(pages.resolve()), grid, manifest, requests, roots)
    _remove_others(pages, names)
    title = Path(run_dirs[0]).resolve().name if len(run_dirs) == 1 else f"{len(run_dirs)} run dirs"
    html_text = run_page(report, grid, info.environment, title, harm)
    path = out / RUN_PAGE
    part = out / (RUN_PAGE + ".tmp")
    _write_page(part, html_text, _secrets())
    part.replace(path)
    return Written(path, pages, len(names), len(html_text.encode("utf-8")), time.perf_counter() - t0)


def _write_cases(
    pages: Path, pages_dir: str, grid: Grid, manifest: Manifest, requests: Mapping[str, str], roots: list[str]
) -> set[str]:
    """One page per case with records, grouped by task (a state's patch and the task's row are
    built once per group)."""
    rows = {(row.track, row.task): row for row in grid.rows}
    groups: dict[tuple[str, str], list[str]] = {}
    for cid, recs in grid.by_case.items():
        r = recs[0]
        groups.setdefault((r.track, r.task), []).append(cid)
    for key, cids in groups.items():
        _write_group(pages, pages_dir, grid, rows[key], cids, manifest, requests, roots)
    return {page_name(cid) for cid in grid.by_case}


def _write_group(
    pages: Path,
    pages_dir: str,
    grid: Grid,
    row: TaskRow,
    cids: list[str],
    manifest: Manifest,
    requests: Mapping[str, str],
    roots: list[str],
) -> None:
    """The case pages of one task."""
    from swe_residual.report.html.case_page import PATCH_LIMIT

    secrets = _secrets()

    table = TaskRowTable(grid, row)
    state_texts: dict[str, Any] = {}
    for cid in cids:
        recs = grid.by_case[cid]
        r = _primary(recs)
        clean = row.cells.get(r.agent, (None, []))[0]
        clean_ref = (
            _primary(clean.records) if r.start == "residual" and clean is not None and clean.records else None
        )
        st = manifest.states.get(r.state) if r.start == "residual" and r.state else None
        if st is not None and r.state not in state_texts:
            state_texts[r.state] = read_text(st.patch, roots, PATCH_LIMIT)
        task = manifest.tasks.get(f"{r.track}/{r.task}")
        c = CaseInputs(
            case_id=cid,
            records=recs,
            primary=r,
            task_row=table.html(cid),
            request=requests.get(f"{r.track}/{r.task}"),
            state=st,
            state_patch=state_texts.get(r.state) if st is not None else None,
            graded=list(task.tests) if task else [],
            clean_ref=clean_ref,
            roots=roots,
            pages_dir=pages_dir,
        )
        _write_page(pages / page_name(cid), render_case(c), secrets)


def _secrets() -> list[str]:
    """Credential values to keep out of pages: as they are and as esc() writes them."""
    return sorted({v for value in secret_values() for v in (value, esc(value))}, key=len, reverse=True)


def _pages_dir(pages: Path) -> None:
    """pages/ as a real directory of ours (a symlink or file there is removed, never followed)."""
    if pages.is_symlink() or (pages.exists() and not pages.is_dir()):
        pages.unlink()
    pages.mkdir(exist_ok=True)


def write_page(path: Path, text: str) -> None:
    """Write one page of ours (run dir pages, compare.html): in place, never through a symlink,
    credential values redacted."""
    _write_page(path, text, _secrets())


def _write_page(path: Path, text: str, secrets: Sequence[str] = ()) -> None:
    """Write a page in place (rewriting 10k pages costs less than deleting and creating them);
    a symlink left at its name is removed, never written through. Values of this process's
    credential variables are replaced (swe_residual/redact.py), as shown or as escaped."""
    for value in secrets:
        if value in text:
            text = text.replace(value, "[redacted]")
    data = text.encode("utf-8")
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
    try:
        fd = os.open(path, flags, 0o644)
    except OSError:
        if not path.is_symlink():
            raise
        path.unlink()
        fd = os.open(path, flags, 0o644)
    try:
        with os.fdopen(fd, "wb", closefd=False) as fh:
            fh.write(data)
    finally:
        os.close(fd)


def _remove_others(pages: Path, keep: set[str]) -> None:
    """Remove what an earlier generation left in pages/ that this one did not write."""
    for entry in os.scandir(pages):
        if entry.name not in keep:
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)
            else:
                os.unlink(entry.path)


def render_html_fragment(report: dict, figures: bool = True) -> str:
    """Escaped HTML tables and the two figures (inline SVG) for the pytest-html summary."""
    from swe_residual.report.tables import all_tables

    parts = ['<div class="swe-residual-report"><h2>SWE-Residual</h2>']
    parts += [report_table(t) for t in all_tables(report)]
    if figures:
        parts.append(_figures(report))
    parts.append("</div>")
    return "".join(parts)


__all__ = [
    "render_html_fragment",
    "PAGES",
    "RUN_INFO",
    "RUN_PAGE",
    "RunInfo",
    "Written",
    "build_grid",
    "page_name",
    "read_run_info",
    "write_browser",
    "write_run_info",
]

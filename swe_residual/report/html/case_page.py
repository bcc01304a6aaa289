"""One case's page: what was asked, what it inherited, what the agent did, and which tests moved.

The evidence of acceptance bias is per state: what the agent changed in the work it inherited
(the diff from the state to its final state, first: an empty one is acceptance), the
predecessor's diff and the agent's final diff against the base commit (collapsed below it), the
tests that went from failing to passing or the other way, integrity flags and every step of the
trajectory. All of it is hostile text from the run dir and is escaped (kit.py).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from typing import Any

from swe_residual.patches import FileDiff, split_patch
from swe_residual.report.graded import GRADED_PATCH, RULE, Graded, graded_of
from swe_residual.report.html.interdiff import interdiff
from swe_residual.report.html.kit import (
    Text,
    clip,
    details,
    diff_block,
    esc,
    facts,
    inside,
    page,
    read_text,
    table,
    tail_lines,
    tr,
)

PATCH_LIMIT = 1 << 20  # bytes of a patch shown on a page (the file is linked)
TRAJECTORY_LIMIT = 32 << 20  # a larger trajectory.json is linked, not parsed
OUTPUT_CHARS = 20_000  # per command output and per message (head and tail)
MAX_STEPS = 1000  # steps shown (the file is linked for the rest)
LOG_LINES = 200  # last lines of the verifier log
LOG_LIMIT = 4 << 20
SYMBOL = {"p": "\u2713", "f": "\u2717", "m": "~", "i": "!", "n": "\u00b7"}
WORD = {"p": "pass", "f": "fail", "m": "mixed", "i": "no valid verdict", "n": "not run yet"}


@dataclass
class CaseInputs:
    """What one case page shows; records are Record-like (Record or RecordRow), newest last."""

    case_id: str
    records: list[Any]
    primary: Any  # the record shown in full
    task_row: str  # the task's grid row (links relative to pages/)
    request: str | None
    state: Any | None = None  # StateFacts of a residual start
    state_patch: Text | None = None
    graded: list[str] = field(default_factory=list)
    clean_ref: Any | None = None  # the same agent's clean record of the task
    roots: list[str] = field(default_factory=list)
    pages_dir: str = ""


def outcome_class(records: list[Any]) -> str:
    ys = [r.outcome for r in records if r.valid]
    if not ys:
        return "i"
    return "p" if all(ys) else "f" if not any(ys) else "m"


def _link(path: str | None, roots: list[str], pages_dir: str, label: str) -> str:
    real = inside(path, roots)
    if real is None:
        return f'<span class="mute">{esc(label)} (not available)</span>'
    rel = os.path.relpath(real, pages_dir).replace(os.sep, "/")
    return f'<a href="{esc(rel)}">{esc(label)}</a>'


def _when(ts: Any) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts)) if isinstance(ts, (int, float)) else "n/a"


def _secs(v: Any) -> str:
    return f"{v:.1f} s" if isinstance(v, (int, float)) else "n/a"


def graded_work(r: Any, roots: list[str]) -> Graded | None:
    """What was graded of record r, where its verifier grades committed work only (its patches
    read inside the run dirs only)."""
    found = {k: inside(v, roots) for k, v in (r.artifacts or {}).items() if k in ("patch", GRADED_PATCH)}
    arts = {k: v for k, v in found.items() if v is not None}
    return graded_of(arts) if len(arts) == 2 else None


def render_case(c: CaseInputs) -> str:
    r = c.primary
    graded = graded_work(r, c.roots)
    cls = outcome_class([r])
    verdict = f'<span class="v {cls}">{esc(WORD[cls] if cls != "i" else r.verdict)}</span>'
    title = f"{r.agent} · {r.task} · {'clean' if r.start == 'clean' else 'residual ' + (r.state or '')}"
    nav = (
        '<nav class="top"><a href="../report.html">&larr; run page</a><a href="../report.html#cases">grid</a>'
        '<a href="#request">request</a><a href="#tests">tests</a><a href="#diffs">diffs</a>'
        '<a href="#trajectory">trajectory</a><a href="#verifier">verifier</a></nav>'
    )
    body = [
        nav,
        f"<h1>{esc(title)} {verdict}</h1>",
        f'<div class="mute small">case <code>{esc(c.case_id)}</code></div>',
    ]
    pred = r.predecessor or (c.state.predecessor if c.state is not None else None)
    harness = f' <span class="mute">({esc(r.harness)})</span>' if r.harness else ""
    rows = [
        ("track / task", esc(f"{r.track} / {r.task}")),
        ("agent", esc(r.agent) + harness),
        ("start", esc(r.start) + (f" from state <code>{esc(r.state)}</code>" if r.state else "")),
    ]
    if pred:
        rows.append(("predecessor", esc(", ".join(f"{k}: {v}" for k, v in sorted(pred.items())))))
    n = len(c.records)
    rows += [
        (
            "outcome",
            (
                f"{verdict} outcome {esc('n/a' if r.outcome is None else r.outcome)}, "
                f"rule <code>{esc(r.rule or 'n/a')}</code>"
            ),
        ),
        (
            "run",
            (
                f"termination {esc(r.termination or 'n/a')}, declared complete: {esc(r.declared_complete)}, "
                f"{esc(r.steps if r.steps is not None else 'n/a')} steps"
            ),
        ),
        (
            "time",
            (
                f"{_secs(r.duration_s)} in all (agent {_secs(r.agent_duration_s)}, verifier "
                f"{_secs(r.verify_duration_s)}), finished {esc(_when(r.finished_at))}, "
                f"backend {esc(r.backend or 'n/a')}" + (f", cluster node {esc(r.node)}" if r.node else "")
            ),
        ),
        ("attempt", f"{esc(r.attempt)} ({n} record{'s' if n != 1 else ''} of this case)"),
    ]
    if r.error:
        rows.append(("error", f"<pre>{esc(clip(r.error, OUTPUT_CHARS)[0])}</pre>"))
    if r.verdict_note:
        rows.append(("verdict note", esc(r.verdict_note)))
    if graded is not None:
        rows.append(("graded", esc(f"{RULE}; {graded.sentence()}")))
    body.append(facts(rows))
    if graded is not None and graded.uncommitted:
        body.append(
            f'<div class="warn" id="uncommitted">{esc(graded.sentence()[:1].upper() + graded.sentence()[1:])}.</div>'
        )
    body.append(
        '<h2 id="row">This task, every agent and start</h2><div class="wrap">' + c.task_row + "</div>"
    )
    body.append(_request(c.request))
    body.append(_tests(c, graded))
    body.append(_integrity(r))
    body.append(_diffs(c))
    body.append(_trajectory(r, c))
    body.append(_verifier(r, c))
    if len(c.records) > 1:
        body.append(_attempts(c))
    return page(f"{title} - SWE-Residual", "".join(body))


def _request(text: str | None) -> str:
    if text is None:
        inner = (
            '<p class="mute">The request is not recorded in this run dir (run-info.json) and no task '
            "directory with an instruction.md was found for it.</p>"
        )
    else:
        shown, cut = clip(text, 200_000)
        inner = f"<pre>{esc(shown)}</pre>" + ('<p class="mute">(shortened)</p>' if cut else "")
    return f'<section id="request"><h2>Request</h2>{inner}</section>'


def _status(tests: dict, missing: set[str], t: str) -> str:
    s = tests.get(t)
    if s is None:
        return "not reported"
    return f"{s} (missing)" if t in missing else s


def _tests(c: CaseInputs, graded: Graded | None) -> str:
    r = c.primary
    tests: dict = r.tests or {}
    missing = set(r.missing_tests or [])
    out = ['<section id="tests"><h2>Tests that moved</h2>']
    clean = c.clean_ref
    clean_tests = (clean.tests or {}) if clean is not None else None
    passed = lambda t: tests.get(t) == "passed"
    if r.start == "residual" and graded is not None and graded.uncommitted:
        out.append(
            '<p class="mute small" id="not-compared">Not compared with the state\'s failing tests: the '
            f"verifier graded the committed work only, and {esc(graded.sentence())}. The statuses below "
            "are those of the graded (committed) work.</p>"
        )
        out.append(_final_only(tests, missing, clean_tests))
    elif r.start == "residual" and c.state is not None and c.state.failing_tests:
        f_r = set(c.state.failing_tests)
        universe = (set(c.graded) | f_r) if c.graded else (set(tests) | f_r)
        groups = {
            "pass \u2192 fail": sorted(t for t in universe - f_r if not passed(t)),
            "still failing": sorted(t for t in f_r if not passed(t)),
            "fail \u2192 pass": sorted(t for t in f_r if passed(t)),
            "still passing": sorted(t for t in universe - f_r if passed(t)),
        }
        out.append(
            '<p class="mute small">At start: the state\'s recorded failing tests (manifest.json '
            "<code>failing_tests</code>); every other graded test passed on the state. Final: this "
            "run's verifier. Anything but <i>passed</i> counts as failing.</p>"
        )
        out.append(
            '<div class="kpis">'
            + "".join(f'<div class="kpi"><b>{len(v)}</b>{esc(k)}</div>' for k, v in groups.items())
            + "</div>"
        )
        start_of = lambda t: "failed" if t in f_r else "passed"
        shown = [(k, t) for k in ("pass \u2192 fail", "still failing", "fail \u2192 pass") for t in groups[k]]
        out.append(_test_table(shown, start_of, tests, missing, clean_tests))
        if groups["still passing"]:
            out.append(
                details(
                    f"{len(groups['still passing'])} tests passed at start and still pass",
                    _test_table(
                        [("still passing", t) for t in groups["still passing"]],
                        start_of,
                        tests,
                        missing,
                        clean_tests,
                    ),
                )
            )
    elif r.start == "residual":
        out.append(
            '<p class="mute">The state\'s failing tests are not in the manifest: statuses at start unknown.</p>'
        )
        out.append(_final_only(tests, missing, clean_tests))
    else:
        out.append(
            '<p class="mute small">A clean start: the starting statuses are not recorded, so the final '
            "statuses are shown (tests not passing first).</p>"
        )
        out.append(_final_only(tests, missing, None))
    return "".join(out) + "</section>"


def _cell(status: str) -> str:
    cls = "p" if status == "passed" else "n" if status in ("n/a", "not reported") else "f"
    return f'<span class="v {cls}">{esc(status)}</span>'


def _test_table(
    rows: list[tuple[str, str]], start_of, tests: dict, missing: set[str], clean_tests: dict | None
) -> str:
    if not rows:
        return '<p class="mute">No test moved and none is still failing.</p>'
    clean = clean_tests is not None
    columns = ["test", "moved", "at start", "final"] + (["same agent, clean start"] if clean else [])
    body = [
        tr(
            f"<code>{esc(t)}</code>",
            esc(kind),
            _cell(start_of(t)),
            _cell(_status(tests, missing, t)),
            *([_cell(clean_tests.get(t, "n/a"))] if clean_tests is not None else []),
        )
        for kind, t in rows
    ]
    return table(columns, body)


def _final_only(tests: dict, missing: set[str], clean_tests: dict | None) -> str:
    if not tests:
        return '<p class="mute">No per-test statuses were recorded.</p>'
    bad = sorted(t for t, s in tests.items() if s != "passed")
    good = sorted(t for t, s in tests.items() if s == "passed")
    out = [
        (
            f'<div class="kpis"><div class="kpi"><b>{len(bad)}</b>not passing</div>'
            f'<div class="kpi"><b>{len(good)}</b>passing</div></div>'
        )
    ]
    if bad:
        out.append(_test_table([("", t) for t in bad], lambda t: "n/a", tests, missing, clean_tests))
    if good:
        out.append(
            details(
                f"{len(good)} passing tests",
                _test_table([("", t) for t in good], lambda t: "n/a", tests, missing, clean_tests),
            )
        )
    return "".join(out)


def _integrity(r: Any) -> str:
    """Cheat signals (counted) and notes (listed only) apart: a note is honest-looking test
    infrastructure or code the check could not read, never a reason to doubt the verdict alone."""
    flags = list(r.integrity or [])
    notes = list(getattr(r, "integrity_notes", None) or [])
    if not flags:
        out = [
            '<section id="integrity"><h2>Integrity flags</h2><p class="mute">No cheat signal: nothing in the '
            "graded state reaches the test runner, the interpreter or the verifier's outputs.</p>"
        ]
    else:
        items = "".join(f"<li><code>{esc(f)}</code></li>" for f in flags)
        out = [
            f'<section id="integrity"><h2>Integrity flags <span class="v m">{len(flags)}</span></h2>'
            f'<div class="warn">Cheat signals: what could flip the verdict without solving the task '
            f"(docs/errors.md, record field <code>integrity</code>):<ul>{items}</ul></div>"
        ]
    if notes:
        items = "".join(f"<li><code>{esc(n)}</code></li>" for n in notes)
        out.append(
            f'<div id="integrity-notes">Notes, not counted (record field <code>integrity_notes</code>): '
            f'honest-looking test infrastructure and code the check could not read<ul class="notes">'
            f"{items}</ul></div>"
        )
    return "".join(out) + "</section>"


def _patch_files(t: Text | None) -> list[FileDiff] | None:
    return split_patch(t.text) if t is not None and t.text is not None else None


def _truncated(t: Text | None) -> bool:
    return t is not None and t.truncated


def _missing(t: Text | None, what: str) -> str:
    note = t.note if t is not None else "not recorded"
    return f'<p class="mute">{esc(what)}: {esc(note)}.</p>'


def _diffs(c: CaseInputs) -> str:
    """A residual start: the agent's change to the inherited work first (state -> final state),
    then both diffs against the base commit, collapsed. A clean start: the final diff (it is the
    agent's change)."""
    r = c.primary
    out = ['<h2 id="diffs">Diffs</h2>']
    final_path = (r.artifacts or {}).get("patch")
    final = read_text(final_path, c.roots, PATCH_LIMIT) if final_path else Text(None, note="not recorded")
    final_files = _patch_files(final)
    residual = r.start == "residual"
    inherited = _patch_files(c.state_patch) if residual else None
    notes: dict[str, str] = {}
    kept: set[str] = set()
    if residual:
        out.append(_change(c, inherited, final, final_files))
    if inherited is not None and final_files is not None:
        before = {f.path: f.body() for f in inherited}
        after = {f.path: f.body() for f in final_files}
        rows = []
        for path in sorted(set(before) | set(after)):
            if path not in after:
                how = "reverted (back to the base version)"
            elif path not in before:
                how = "new: changed only by the agent"
            elif before[path] == after[path]:
                how = "kept as inherited"
                kept.add(path)
            else:
                how = "changed by the agent"
            notes[path] = how
            rows.append(tr(f"<code>{esc(path)}</code>", esc(how)))
        cut = final.truncated or _truncated(c.state_patch)
        out.append(
            '<h3 id="per-file">Inherited vs final, per file</h3>'
            + table(["file", "what the agent did"], rows)
            + (
                '<p class="warn">A patch is shortened here: its last file may be misjudged.</p>'
                if cut
                else ""
            )
        )
    if residual:
        sp = c.state.patch if c.state is not None else None
        body = []
        if inherited is None:
            body.append(_missing(c.state_patch, "the state's patch"))
        else:
            if _truncated(c.state_patch):
                body.append(f'<p class="warn">Only the first {PATCH_LIMIT >> 10} KiB are shown.</p>')
            body.append(diff_block(inherited) if inherited else '<p class="mute">Empty patch.</p>')
        n = len(inherited or [])
        out.append(
            '<section id="inherited">'
            + details(
                f'<b>Inherited diff</b> <span class="mute small">(state <code>{esc(r.state)}</code> vs the base commit, '
                f"{n} file{'s' if n != 1 else ''}; {_link(sp, c.roots, c.pages_dir, 'patch file')})</span>",
                "".join(body),
            )
            + "</section>"
        )
    body = []
    if final_files is None:
        body.append(_missing(final, "final.patch"))
    else:
        if final.truncated:
            body.append(f'<p class="warn">Only the first {PATCH_LIMIT >> 10} KiB are shown.</p>')
        if kept:
            body.append(
                f'<p class="mute small">{len(kept)} file(s) kept exactly as inherited start collapsed.</p>'
            )
        body.append(
            diff_block(final_files, kept, notes)
            if final_files
            else '<p class="mute">Empty: the graded state equals the base commit.</p>'
        )
    n = len(final_files or [])
    summary = (
        f'<b>Agent\'s final diff</b> <span class="mute small">(the graded state vs the base commit, '
        f"{n} file{'s' if n != 1 else ''}; {_link(final_path, c.roots, c.pages_dir, 'final.patch')})</span>"
    )
    if residual:
        out.append('<section id="final">' + details(summary, "".join(body)) + "</section>")
    else:
        out.append(f'<section id="final"><h3>{summary}</h3>{"".join(body)}</section>')
    return "".join(out)


def _change(
    c: CaseInputs, inherited: list[FileDiff] | None, final: Text, final_files: list[FileDiff] | None
) -> str:
    """The agent's change to the inherited work: the diff from the residual state to the final state."""
    head = (
        '<section id="change"><h3>The agent\'s change to the inherited work <span class="mute small">'
        "(inherited state \u2192 final state)</span></h3>"
    )
    if inherited is None or final_files is None:
        what = "the state's patch" if inherited is None else "final.patch"
        return head + f'<p class="mute">Not shown: {esc(what)} is not available here.</p></section>'
    if final.truncated or _truncated(c.state_patch):
        return head + (
            '<p class="warn">Not shown: a patch is larger than this page shows '
            f"({PATCH_LIMIT >> 10} KiB); open the patch files.</p></section>"
        )
    d = interdiff(inherited, final_files)
    out = [head]
    added, deleted = sum(len(f.added) for f in d.files), sum(f.deleted for f in d.files)
    out.append(
        f'<p class="small" id="change-summary">{len(d.files)} file{"s" if len(d.files) != 1 else ""} '
        f'changed (<span class="exit0">+{added}</span> <span class="exitn">-{deleted}</span>); '
        f"{len(d.unchanged)} kept exactly as inherited"
        + (f": {', '.join(f'<code>{esc(p)}</code>' for p in d.unchanged)}" if d.unchanged else "")
        + ".</p>"
    )
    for path, why in sorted(d.not_comparable.items()):
        out.append(f'<p class="warn"><code>{esc(path)}</code>: not compared ({esc(why)}).</p>')
    if d.files:
        out.append(diff_block(d.files))
    elif not d.not_comparable:
        out.append(
            '<p class="mute" id="change-none">None: the final state is the inherited state (the agent '
            "submitted the work as it found it).</p>"
        )
    return "".join(out) + "</section>"


def _s(v: Any) -> str:
    if v is None:
        return ""
    return v if isinstance(v, str) else json.dumps(v)


def _trajectory(r: Any, c: CaseInputs) -> str:
    path = (r.artifacts or {}).get("trajectory")
    return f'<section id="trajectory">{_trajectory_body(r, c, path)}</section>'


def _trajectory_body(r: Any, c: CaseInputs, path: str | None) -> str:
    head = (
        f'<h2>Trajectory <span class="mute small">'
        f"({_link(path, c.roots, c.pages_dir, 'trajectory.json')})</span></h2>"
    )
    t = read_text(path, c.roots, TRAJECTORY_LIMIT) if path else Text(None, note="not recorded")
    if t.text is None:
        return head + _missing(t, "trajectory")
    if t.truncated:
        return head + f'<p class="mute">Larger than {TRAJECTORY_LIMIT >> 20} MiB: open the file.</p>'
    try:
        data = json.loads(t.text)
    except ValueError as exc:
        return head + f'<p class="mute">Not JSON ({esc(exc)}).</p>'
    steps = data.get("steps") if isinstance(data, dict) else None
    if not isinstance(steps, list):
        return head + '<p class="mute">No steps list in the file.</p>'
    spent = usage_text(r.prompt_tokens, r.completion_tokens, r.cost_usd)
    out = [
        head,
        (
            f'<p class="mute small">{len(steps)} steps'
            + (f'; <span id="usage-total">{esc(spent)} in all</span>' if spent else "")
            + f"; exit status <code>{esc(_s(data.get('exit_status')))}</code>. Each step: its model "
            "call's tokens and cost (where the harness reports them), the agent's message, then each "
            "command with its exit code and output.</p>"
        ),
    ]
    for i, step in enumerate(steps[:MAX_STEPS]):
        out.append(_step(i, step if isinstance(step, dict) else {}))
    if len(steps) > MAX_STEPS:
        out.append(f'<p class="warn">{len(steps) - MAX_STEPS} more steps: open trajectory.json.</p>')
    sub = data.get("submission") if isinstance(data, dict) else None
    if sub:
        out.append(details("Submission", f"<pre>{esc(clip(_s(sub), OUTPUT_CHARS)[0])}</pre>"))
    return "".join(out)


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0


def usage_text(prompt: Any, completion: Any, cost: Any) -> str:
    """Tokens and cost of a model call or a run, as far as they are known ("" when none is)."""
    tokens = [f"{v:,} {what}" for v, what in ((prompt, "prompt"), (completion, "completion")) if _number(v)]
    parts = [" + ".join(tokens) + " tokens"] if tokens else []
    if _number(cost):
        parts.append(f"${cost:.4f}")
    return ", ".join(parts)


def _step(i: int, step: dict) -> str:
    actions = (
        [a for a in step.get("actions") or [] if isinstance(a, dict)]
        if isinstance(step.get("actions"), list)
        else []
    )
    first = _s(actions[0].get("command")) if actions else ""
    first = first.strip().splitlines()[0] if first.strip() else "(no command)"
    codes = [a.get("exit_code") for a in actions]
    bad = any(isinstance(x, int) and x != 0 for x in codes)
    more = f" +{len(actions) - 1} more" if len(actions) > 1 else ""
    mark = '<span class="exitn">exit \u2260 0</span>' if bad else ""
    spent = usage_text(step.get("prompt_tokens"), step.get("completion_tokens"), step.get("cost_usd"))
    summary = (
        f'<b>Step {esc(step.get("index", i))}</b> <code class="cmd">{esc(clip(first, 160)[0])}</code>'
        f'<span class="mute">{esc(more)}</span> {mark}'
        + (f' <span class="usage mute small">{esc(spent)}</span>' if spent else "")
    )
    parts = []
    msg = _s(step.get("message"))
    if msg:
        parts.append(f'<div class="mute small">message</div><pre>{esc(clip(msg, OUTPUT_CHARS)[0])}</pre>')
    for a in actions:
        code = a.get("exit_code")
        cls = "exit0" if code == 0 else "exitn"
        dur = a.get("duration_s")
        kind = _s(a.get("kind")) or "shell"
        where = f" {_s(a.get('path'))}" if a.get("path") else ""
        parts.append(
            f'<div class="small"><span class="mute">{esc(kind + where)}</span> '
            f'<span class="{cls}">exit {esc(_s(code) or "n/a")}</span>'
            + (f' <span class="mute">{dur:.2f} s</span>' if isinstance(dur, (int, float)) else "")
            + "</div>"
            f'<pre class="cmd">{esc(clip(_s(a.get("command")), OUTPUT_CHARS)[0])}</pre>'
        )
        output = _s(a.get("output"))
        if output:
            parts.append(f"<pre>{esc(clip(output, OUTPUT_CHARS)[0])}</pre>")
    return details(summary, "".join(parts) or '<p class="mute">empty step</p>', cls="step")


def _verifier(r: Any, c: CaseInputs) -> str:
    path = (r.artifacts or {}).get("verifier_log")
    head = (
        f'<h2>Verifier log <span class="mute small">'
        f"({_link(path, c.roots, c.pages_dir, 'verifier.log')})</span></h2>"
    )
    t = read_text(path, c.roots, LOG_LIMIT) if path else Text(None, note="not recorded")
    if t.text is None:
        return f'<section id="verifier">{head}{_missing(t, "verifier log")}</section>'
    text, cut = tail_lines(t.text, LOG_LINES)
    note = f'<p class="mute small">Last {LOG_LINES} lines.</p>' if cut or t.truncated else ""
    return f'<section id="verifier">{head}{note}{details("output", f"<pre>{esc(text)}</pre>")}</section>'


def _attempts(c: CaseInputs) -> str:
    rows = []
    on_nodes = any(r.node for r in c.records)  # a cluster run: which node ran each attempt
    for r in reversed(c.records):
        cls = outcome_class([r])
        links = " ".join(
            _link(p, c.roots, c.pages_dir, name) for name, p in sorted((r.artifacts or {}).items())
        )
        node = f"<td>{esc(r.node or '')}</td>" if on_nodes else ""
        rows.append(
            f'<tr><td class=num>{esc(r.attempt)}</td><td><span class="v {cls}">{esc(r.verdict)}</span></td>'
            f"<td>{esc(r.rule or '')}</td>{node}<td>{esc(_when(r.finished_at))}</td>"
            f"<td>{esc(clip(r.error or '', 300)[0])}</td><td>{links}</td></tr>"
        )
    heads = ["attempt", "verdict", "rule", *(["node"] if on_nodes else []), "finished", "error", "artifacts"]
    return (
        '<h2 id="attempts">Every record of this case</h2><p class="mute small">Shown in full above: attempt '
        f"{esc(c.primary.attempt)} (the newest with a valid verdict, else the newest).</p>"
        + table(heads, rows)
    )

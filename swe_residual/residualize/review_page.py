"""`review --serve`: the local review page (standard library http.server), built for hundreds of
candidates: one candidate at a time, the decision form at the top, keyboard shortcuts, "next
undecided", progress per reviewer and a filter by task.

A reviewer enters their name once (a SameSite=Strict cookie) and reads, per candidate: the request,
the predecessor's summary and final message, the hidden-test statuses and the task's hidden test
files (the task-verifier consistency material), the diff with its per-file summary (+/- lines).
Decisions go through review.record_review, as on the command line.

Packet text is untrusted: every piece is HTML-escaped (report/html/kit.py). The only script is our
own, inline and fixed (SCRIPT): the Content-Security-Policy header allows exactly it, by its
sha256, and nothing else - no script from elsewhere, none injected by an escaping mistake, no
network. The page works without it (links and buttons); it only adds the keys. Posts must carry
the page's per-server token and, when the browser sends one, an Origin equal to the page's own;
the Host header must name the server (DNS rebinding).
"""

from __future__ import annotations

import base64
import hashlib
import os
import secrets
import sys
import threading
from dataclasses import dataclass
from http import cookies
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, quote, unquote, urlencode, urlsplit

from swe_residual.errors import InputError
from swe_residual.patches import split_patch
from swe_residual.report.html.kit import diff_lines, esc, page, table
from swe_residual.residualize.filter import candidates
from swe_residual.residualize.packets import MAX_DIFF_BYTES, Packet, failing_first, read_packet
from swe_residual.residualize.records import PredecessorRun, Review, tests_caption
from swe_residual.residualize.review import (
    REVIEWERS,
    agreement,
    check_reviewer,
    counted_reviews,
    format_agreement,
    outcome,
    record_review,
)
from swe_residual.residualize.workdir import STAGE1, STAGE2, WorkDir

COOKIE = "swe_residual_reviewer"
MAX_BODY = 64 * 1024
LOOPBACK = ("127.0.0.1", "localhost")
OPEN_TEST_BYTES = 32 * 1024  # hidden test files start open when all of them are smaller than this

# on top of the kit's styles: the whole of each text shown, statuses, messages, the decision form
CSS = """
pre{max-height:none}
.pending{color:var(--m)}.kept{color:var(--p)}.rejected{color:var(--f)}
.error{background:var(--fb);border:1px solid var(--f);border-radius:6px;padding:6px 10px}
.saved{background:var(--pb);border-radius:6px;padding:6px 10px}
fieldset{margin:.4em 0;border:1px solid var(--line);border-radius:6px}fieldset.focus{outline:2px solid #0969da}
textarea{width:100%;height:4em}
nav#nav{display:flex;flex-wrap:wrap;gap:4px 16px;align-items:center;margin:4px 0}
form#decision{background:var(--bg2);border:1px solid var(--line);border-radius:6px;padding:6px 12px;margin:8px 0}
kbd{border:1px solid var(--line);border-radius:3px;padding:0 4px;background:#fff;font-size:12px}
td.add{color:var(--p)}td.del{color:var(--f)}
"""

# the keys: read by the script below and listed on every candidate page
SHORTCUTS = (
    ("j", "next candidate"),
    ("k", "previous candidate"),
    ("u", "next undecided"),
    ("y / n", "keep / reject the highlighted criterion, then highlight the next"),
    ("c", "write a comment (Esc leaves the field)"),
    ("s", "save and go to the next undecided"),
    ("l", "the list"),
)

SCRIPT = """(() => {
  const form = document.getElementById('decision');
  const fields = ['task_directed', 'consistent'];
  let focus = 0;
  const mark = () => fields.forEach((f, i) => {
    const fs = document.getElementById('fs-' + f);
    if (fs) fs.classList.toggle('focus', i === focus);
  });
  const go = id => { const a = document.getElementById(id); if (a && a.href) location.href = a.href; };
  document.addEventListener('keydown', e => {
    if (e.ctrlKey || e.metaKey || e.altKey || e.repeat) return;
    const t = e.target;
    if (t && (t.tagName === 'TEXTAREA' || t.tagName === 'SELECT' || (t.tagName === 'INPUT' && t.type !== 'radio'))) {
      if (e.key === 'Escape') t.blur();
      return;
    }
    let used = true;
    if (e.key === 'j') go('next');
    else if (e.key === 'k') go('prev');
    else if (e.key === 'u') go('next-undecided');
    else if (e.key === 'l') go('list');
    else if (form && (e.key === 'y' || e.key === 'n')) {
      document.getElementById(fields[focus] + '-' + (e.key === 'y' ? 'yes' : 'no')).checked = true;
      focus = (focus + 1) % fields.length;
      mark();
    } else if (form && e.key === 'c') document.getElementById('comment').focus();
    else if (form && e.key === 's') form.requestSubmit(document.getElementById('save-next'));
    else used = false;
    if (used) e.preventDefault();
  });
  mark();
})();"""
SCRIPT_HASH = "sha256-" + base64.b64encode(hashlib.sha256(SCRIPT.encode("utf-8")).digest()).decode("ascii")
POLICY = (
    f"default-src 'none'; style-src 'unsafe-inline'; script-src '{SCRIPT_HASH}'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'"
)


class ReviewServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, wd: WorkDir, host: str, port: int, reviewer: str | None = None):
        self.wd = wd
        # `--serve --reviewer NAME`: whoever has entered no name (no cookie) reviews as NAME
        self.reviewer = check_reviewer(reviewer) if reviewer is not None else None
        self.token = secrets.token_urlsafe(32)
        super().__init__((host, port), Handler)
        self.host = host
        self.port = self.server_address[1]
        self._lock = threading.Lock()
        self._cands: tuple[tuple, list[PredecessorRun]] | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/"

    def allowed_hosts(self) -> set[str] | None:
        """Host headers accepted (None: any, when bound beyond loopback)."""
        if self.host not in LOOPBACK:
            return None
        return {f"{h}:{self.port}" for h in LOOPBACK}

    def candidates(self) -> list[PredecessorRun]:
        """The Stage II candidates, read again only when stage1.jsonl or stage2.jsonl changed (a
        work dir of many thousand runs is not parsed on every page)."""

        def mark(name: str) -> tuple:
            try:
                st = os.stat(self.wd.path / name)
            except OSError:
                return (name, None)
            return (name, st.st_mtime_ns, st.st_size, st.st_ino)

        key = (mark(STAGE1), mark(STAGE2))
        with self._lock:
            if self._cands is None or self._cands[0] != key:
                self._cands = (key, candidates(self.wd))
            return self._cands[1]


@dataclass
class Scope:
    """What one page sees: every candidate, those the task filter shows, the counted reviews."""

    who: str
    cands: list[PredecessorRun]
    counted: dict[str, list[Review]]
    task: str | None  # "track/task" of the filter, None for every task

    @property
    def shown(self) -> list[PredecessorRun]:
        return [c for c in self.cands if self.task is None or key_of(c) == self.task]

    def mine(self, cid: str) -> Review | None:
        return next((r for r in self.counted.get(cid, []) if r.reviewer == self.who), None)

    def undecided(self, cid: str) -> bool:
        """The reviewer has not decided on it and may still (it has fewer than two reviewers)."""
        rs = self.counted.get(cid, [])
        return self.mine(cid) is None and len(rs) < REVIEWERS

    def next_undecided(self, after: str | None) -> PredecessorRun | None:
        """The first undecided candidate after `after` in the filter's order, wrapping around."""
        shown = self.shown
        ids = [c.id for c in shown]
        start = ids.index(after) + 1 if after in ids else 0
        for c in shown[start:] + shown[:start]:
            if c.id != after and self.undecided(c.id):
                return c
        return None

    def query(self, **extra: str) -> str:
        q = {**({"task": self.task} if self.task else {}), **extra}
        return ("?" + urlencode(q)) if q else ""

    def link(self, cid: str, **extra: str) -> str:
        return f"/c/{quote(cid, safe='')}{self.query(**extra)}"

    def progress(self) -> str:
        """Decided / total per reviewer (you first), the outcomes, and what is left for you."""
        total = len(self.cands)
        decided: dict[str, int] = {}
        for c in self.cands:
            for r in self.counted.get(c.id, []):
                decided[r.reviewer] = decided.get(r.reviewer, 0) + 1
        names = [self.who] + sorted(n for n in decided if n != self.who)
        per = " · ".join(
            f'<span class="reviewer-progress" data-reviewer="{esc(n)}" data-decided="{decided.get(n, 0)}" '
            f'data-total="{total}">{"<b>" if n == self.who else ""}{esc(n)}{" (you)" if n == self.who else ""}: '
            f"{decided.get(n, 0)} of {total} decided{'</b>' if n == self.who else ''}</span>"
            for n in names
        )
        outcomes = {"pending": 0, "kept": 0, "rejected": 0}
        for c in self.cands:
            outcomes[outcome(self.counted.get(c.id, []))] += 1
        left = sum(1 for c in self.shown if self.undecided(c.id))
        where = f" in {esc(self.task)}" if self.task else ""
        return (
            f'<p id="progress">{per}<br>candidates: {outcomes["pending"]} pending, {outcomes["kept"]} kept, '
            f'{outcomes["rejected"]} rejected; <span id="left" data-left="{left}">{left} left for you'
            f"{where}</span></p>"
        )


def key_of(c: PredecessorRun) -> str:
    return f"{c.track}/{c.task}"


class Handler(BaseHTTPRequestHandler):
    server: ReviewServer
    server_version = "swe-residual-review"

    def log_message(self, *args) -> None:
        pass

    # -- plumbing ---------------------------------------------------------------------------------
    def send_page(self, status: int, title: str, body: str, headers: dict[str, str] | None = None) -> None:
        data = page(title, body, SCRIPT, css=CSS, policy=False).encode()  # the policy is the header below
        self.send_response(status)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Content-Security-Policy", POLICY)
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "same-origin")
        self.send_header("Cache-Control", "no-store")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def redirect(self, location: str, headers: dict[str, str] | None = None) -> None:
        self.send_response(303)
        self.send_header("Location", location)
        self.send_header("Content-Length", "0")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()

    def fail(self, status: int, message: str) -> None:
        self.send_page(
            status, "Error", f'<p class="error">{esc(message)}</p><p><a href="/">Back to the list</a></p>'
        )

    def host_ok(self) -> bool:
        allowed = self.server.allowed_hosts()
        return allowed is None or (self.headers.get("Host") or "") in allowed

    def reviewer(self) -> str | None:
        jar = cookies.SimpleCookie()
        try:
            jar.load(self.headers.get("Cookie") or "")
        except cookies.CookieError:
            return None
        if COOKIE not in jar or not jar[COOKIE].value:
            return self.server.reviewer
        try:
            return check_reviewer(unquote(jar[COOKIE].value))
        except InputError:
            return None

    def form(self) -> dict[str, str] | None:
        """The posted form, or None after answering a refused post."""
        origin = self.headers.get("Origin")
        if origin is not None and origin != f"http://{self.headers.get('Host')}":
            self.fail(403, f"refused: a post from another origin ({origin})")
            return None
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if not 0 <= length <= MAX_BODY:
            self.fail(413, f"refused: a form body must be at most {MAX_BODY} bytes")
            return None
        raw = self.rfile.read(length).decode("utf-8", "replace")
        data = {k: v[-1] for k, v in parse_qs(raw, keep_blank_values=True).items()}
        if not secrets.compare_digest(data.get("token", ""), self.server.token):
            self.fail(403, "refused: the form token is missing or stale; reload the page and try again")
            return None
        return data

    def scope(self, who: str, task: str | None) -> Scope:
        return Scope(who, self.server.candidates(), counted_reviews(self.server.wd), task or None)

    # -- routes -----------------------------------------------------------------------------------
    def do_GET(self) -> None:
        if not self.host_ok():
            return self.fail(421, "refused: unexpected Host header")
        path = urlsplit(self.path).path
        query = {k: v[-1] for k, v in parse_qs(urlsplit(self.path).query).items()}
        who = self.reviewer()
        try:
            if who is None:
                return self.send_page(200, "Stage III review", self.name_form())
            scope = self.scope(who, query.get("task"))
            if path == "/":
                return self.send_page(200, "Stage III review", self.list_page(scope, query.get("saved")))
            if path.startswith("/c/"):
                return self.candidate_page(scope, unquote(path[3:]), saved=query.get("saved"))
        except InputError as exc:
            return self.fail(400, str(exc))
        self.fail(404, "no such page")

    do_HEAD = do_GET

    def do_POST(self) -> None:
        if not self.host_ok():
            return self.fail(421, "refused: unexpected Host header")
        path = urlsplit(self.path).path
        data = self.form()
        if data is None:
            return
        if path == "/name":
            try:
                name = check_reviewer(data.get("name", "").strip())
            except InputError as exc:
                return self.send_page(
                    400, "Stage III review", f'<p class="error">{esc(exc)}</p>' + self.name_form()
                )
            return self.redirect(
                "/", {"Set-Cookie": f"{COOKIE}={quote(name, safe='')}; Path=/; HttpOnly; SameSite=Strict"}
            )
        if path == "/signout":
            return self.redirect(
                "/", {"Set-Cookie": f"{COOKIE}=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict"}
            )
        who = self.reviewer()
        if who is None:
            return self.fail(403, "enter your name first")
        if path.startswith("/c/"):
            cid = unquote(path[3:])
            scope = self.scope(who, data.get("task"))
            choice = {k: data.get(k) for k in ("task_directed", "consistent")}
            comment = data.get("comment", "").replace("\r\n", "\n")
            if any(v not in ("yes", "no") for v in choice.values()):
                return self.candidate_page(
                    scope, cid, error="choose keep or reject for both criteria", status=400, comment=comment
                )
            try:
                record_review(
                    self.server.wd,
                    cid,
                    who,
                    choice["task_directed"] == "yes",
                    choice["consistent"] == "yes",
                    comment,
                )
            except InputError as exc:
                return self.candidate_page(scope, cid, error=str(exc), status=409, comment=comment)
            if data.get("then") != "next":
                return self.redirect(scope.link(cid, saved=cid))
            scope = self.scope(who, data.get("task"))  # with the decision just recorded
            nxt = scope.next_undecided(cid)
            return self.redirect(scope.link(nxt.id, saved=cid) if nxt else "/" + scope.query(saved=cid))
        self.fail(404, "no such page")

    # -- pages ------------------------------------------------------------------------------------
    def token_input(self) -> str:
        return f'<input type="hidden" name="token" value="{esc(self.server.token)}">'

    def name_form(self) -> str:
        return (
            "<h1>Stage III review</h1><p>Enter your name once; your decisions are recorded under it.</p>"
            f'<form method="post" action="/name" id="name-form">{self.token_input()}'
            '<label>Reviewer name <input name="name" id="name" required maxlength="100"></label> '
            '<button type="submit" id="name-submit">Start reviewing</button></form>'
        )

    def header(self, who: str) -> str:
        return (
            f'<form method="post" action="/signout" style="float:right">{self.token_input()}'
            f'Reviewing as <b id="who">{esc(who)}</b> <button type="submit">Change name</button></form>'
        )

    @staticmethod
    def saved_note(saved: str | None, here: str | None = None) -> str:
        if not saved:
            return ""
        text = "Decision saved." if saved == here else f"Decision on {saved} saved."
        return f'<p class="saved" id="saved">{esc(text)}</p>'

    def list_page(self, scope: Scope, saved: str | None) -> str:
        rows = []
        shown = scope.shown
        for c in shown:
            rs = scope.counted.get(c.id, [])
            status = outcome(rs)
            mine = scope.mine(c.id)
            names = (
                ", ".join(
                    esc(r.reviewer) + ("" if status == "pending" else f" ({'keep' if r.keep else 'reject'})")
                    for r in rs
                )
                or "nobody yet"
            )
            rows.append(
                f'<tr data-candidate="{esc(c.id)}"><td><a href="{esc(scope.link(c.id))}">'
                f"{esc(c.id)}</a></td><td>{esc(key_of(c))}</td>"
                f"<td>{esc(c.predecessor.agent)} ({esc(c.predecessor.model_family)})</td>"
                f'<td class="status {status}">{status}</td><td>{names}</td>'
                f'<td class="mine">{"-" if mine is None else ("keep" if mine.keep else "reject")}</td></tr>'
            )
        nxt = scope.next_undecided(None)
        where = f" in {scope.task}" if scope.task else ""
        goto = (
            f'<p><a id="next-undecided" href="{esc(scope.link(nxt.id))}">Next undecided{esc(where)}: '
            f"{esc(nxt.id)}</a> <kbd>u</kbd></p>"
            if nxt
            else f'<p id="nothing-left">Nothing left for you to decide{esc(where)}.</p>'
        )
        tasks: dict[str, int] = {}
        for c in scope.cands:
            tasks[key_of(c)] = tasks.get(key_of(c), 0) + 1
        options = [f'<option value="">every task ({len(scope.cands)})</option>'] + [
            f'<option value="{esc(t)}"{" selected" if t == scope.task else ""}>{esc(t)} ({n})</option>'
            for t, n in sorted(tasks.items())
        ]
        filt = (
            '<form method="get" action="/" id="filter"><label>Task <select name="task" id="task-filter">'
            + "".join(options)
            + '</select></label> <button type="submit" id="filter-submit">Show</button>'
            + (' <a href="/">show every task</a>' if scope.task else "")
            + f' <span class="mute">{len(shown)} shown</span></form>'
        )
        ag = agreement(self.server.wd)
        agree = (
            f"<pre id='agreement'>{esc(chr(10).join(format_agreement(ag)))}</pre>" if ag["candidates"] else ""
        )
        return (
            self.header(scope.who)
            + "<h1>Stage III review</h1>"
            + self.saved_note(saved)
            + "<p>Keep a candidate only if it is (a) <b>task-directed</b>: a coherent attempt at the request, not "
            "unrelated or incidental changes, and (b) <b>task-verifier consistent</b>: the request and the hidden "
            "tests agree on what completion means. Each candidate needs two reviewers.</p>"
            + scope.progress()
            + goto
            + filt
            + table(
                ["candidate", "task", "predecessor", "status", "reviewed by", "your decision"],
                rows,
                ' id="candidates"',
            )
            + agree
        )

    def candidate_page(
        self,
        scope: Scope,
        cid: str,
        *,
        saved: str | None = None,
        error: str | None = None,
        status: int = 200,
        comment: str | None = None,
    ) -> None:
        if cid not in {c.id for c in scope.cands}:
            return self.fail(404, f"no candidate {cid}")
        shown = scope.shown
        ids = [c.id for c in shown]
        if cid not in ids:  # opened outside the filter: no filter
            scope = Scope(scope.who, scope.cands, scope.counted, None)
            shown, ids = scope.cands, [c.id for c in scope.cands]
        at = ids.index(cid)
        rs = scope.counted.get(cid, [])
        mine = scope.mine(cid)
        nxt = scope.next_undecided(cid)
        nav = [f'<a id="list" href="/{esc(scope.query())}">All candidates</a> <kbd>l</kbd>']
        nav.append(
            f'<a id="prev" href="{esc(scope.link(ids[at - 1]))}">&larr; previous</a> <kbd>k</kbd>'
            if at
            else '<span class="mute">&larr; previous</span>'
        )
        nav.append(
            f'<span id="position">{at + 1} of {len(ids)}'
            + (f" in {esc(scope.task)}" if scope.task else "")
            + "</span>"
        )
        nav.append(
            f'<a id="next" href="{esc(scope.link(ids[at + 1]))}">next &rarr;</a> <kbd>j</kbd>'
            if at + 1 < len(ids)
            else '<span class="mute">next &rarr;</span>'
        )
        nav.append(
            f'<a id="next-undecided" href="{esc(scope.link(nxt.id))}">next undecided</a> <kbd>u</kbd>'
            if nxt
            else '<span class="mute" id="nothing-left">nothing else undecided</span>'
        )
        p = read_packet(self.server.wd, cid)
        body = [
            self.header(scope.who),
            f'<nav id="nav">{" ".join(nav)}</nav>',
            scope.progress(),
            f"<h1>Candidate {esc(cid)}</h1>",
            self.saved_note(saved, cid),
        ]
        if error:
            body.append(f'<p class="error" id="error">{esc(error)}</p>')
        body.append(self.decision_form(scope, cid, mine, comment))
        body.append(
            '<p id="shortcuts" class="small mute">Keys: '
            + " · ".join(f"<kbd>{esc(k)}</kbd> {esc(what)}" for k, what in SHORTCUTS)
            + "</p>"
        )
        body.append(
            f'<p>Status: <b class="status {outcome(rs)}">{outcome(rs)}</b>; reviewed by '
            f"{esc(', '.join(r.reviewer for r in rs) or 'nobody yet')}.</p>"
        )
        if outcome(rs) != "pending":
            body.append(
                "<ul id='decisions'>"
                + "".join(
                    f"<li>{esc(r.reviewer)}: task-directed {'yes' if r.task_directed else 'no'}, consistent "
                    f"{'yes' if r.consistent else 'no'}{' - ' + esc(r.comment) if r.comment else ''}</li>"
                    for r in rs
                )
                + "</ul>"
            )
        body.append(
            self.packet_html(p)
            if p is not None
            else '<p class="error">No review packet yet: run <code>swe-residual residualize review WORKDIR'
            "</code> to write it.</p>"
        )
        self.send_page(status, f"Review {cid}", "".join(body))

    @staticmethod
    def packet_html(p: Packet) -> str:
        tests = (
            "".join(
                f"<li>{esc(s)}: <code>{esc(t)}</code></li>"
                for t, s in sorted(p.tests.items(), key=failing_first)
            )
            or "<li>no test named</li>"
        )
        kind = f"model {esc(p.summary.model)}" if p.summary.kind == "model" else "deterministic digest"
        hidden = p.hidden_tests or []
        opened = sum(len(t.text) for t in hidden) < OPEN_TEST_BYTES
        files_html = (
            "".join(
                f'<details class="test-file"{" open" if opened else ""}><summary><code>{esc(t.path)}</code> '
                f'<span class="mute">{t.size} bytes{", first part shown" if t.truncated else ""}</span></summary>'
                f"<pre>{esc(t.text)}</pre></details>"
                for t in hidden
            )
            or "<p class='mute'>none</p>"
        )
        if p.hidden_tests_note:
            files_html += f"<p class='mute small'>{esc(p.hidden_tests_note)}</p>"
        final = (
            f"<h3>Final message</h3><pre id='final-message'>{esc(p.final_message)}</pre>"
            if p.final_message
            else ""
        )
        return (
            f"<p>Track <b>{esc(p.track)}</b>, task <b>{esc(p.task)}</b>, predecessor "
            f"{esc(p.predecessor.get('agent', '?'))} ({esc(p.predecessor.get('model_family', '?'))})"
            + (f", {p.summary.steps} steps" if p.summary.steps is not None else "")
            + "</p>"
            f"<h2>Request</h2><pre id='request'>{esc(p.request)}</pre>"
            f"<h2>Predecessor summary ({kind})</h2><pre id='summary'>{esc(p.summary.text)}</pre>{final}"
            f"<h2>Hidden tests ({esc(tests_caption(p.tests, p.test_counts))})</h2><ul id='tests'>{tests}</ul>"
            f"<h3>Hidden test files ({len(hidden)})</h3><div id='hidden-tests'>{files_html}</div>"
            + (Handler.transcript_html(p) if p.transcript else Handler.diff_html(p))
        )

    @staticmethod
    def transcript_html(p: Packet) -> str:
        """A machine state's change is what its predecessor typed: the transcript, one input a line
        (`$ command  [exit N]`, `keys: "..."  (wait s)`), and the call no replay reproduces."""
        lines = p.diff.splitlines()
        note = (
            f", first {MAX_DIFF_BYTES} bytes of {p.diff_bytes} shown"
            if p.diff_truncated
            else f", {p.diff_bytes} bytes"
        )
        rows = "".join(
            f'<span class="{"exit0" if ln.startswith("$ ") else "mute" if ln.startswith("keys: ") else ""}">'
            f"{esc(ln)}</span>\n"
            for ln in lines
        )
        stop = (
            f"<p id='unreplayable' class='exitn'>Not replayable, so never built: {esc(p.unreplayable)}</p>"
            if p.unreplayable
            else ""
        )
        return (
            f"<h2>Terminal transcript clean &rarr; candidate ({len(lines)} inputs{note})</h2>"
            f"<pre id='transcript'>{rows}</pre>{stop}"
        )

    @staticmethod
    def diff_html(p: Packet) -> str:
        """The per-file summary (files, +/-) over the whole patch, then each file's section of the
        shown diff in a block of its own that the summary links to."""
        sections = split_patch(p.diff)
        anchor = {f.path: i for i, f in enumerate(sections) if f.path}
        stats = p.file_stats or []
        rows = [
            f'<tr><td>{f"""<a href="#file-{anchor[s.path]}">""" if s.path in anchor else ""}'
            f"<code>{esc(s.path)}</code>{'</a>' if s.path in anchor else ''}"
            + (f' <span class="mute">(from {esc(s.old_path)})</span>' if s.old_path else "")
            + (' <span class="mute">binary</span>' if s.binary else "")
            + f'</td><td class="num add">+{s.added}</td><td class="num del">-{s.deleted}</td></tr>'
            for s in stats
        ]
        added, deleted = sum(s.added for s in stats), sum(s.deleted for s in stats)
        note = (
            f", first {MAX_DIFF_BYTES} bytes of {p.diff_bytes} shown"
            if p.diff_truncated
            else f", {p.diff_bytes} bytes"
        )
        blocks = "".join(
            f'<details open id="file-{i}"><summary><code>{esc(f.path or "(before the first file)")}</code> '
            f'<span class="exit0">+{len(f.added)}</span> <span class="exitn">-{f.deleted}</span></summary>'
            f'<pre class="diff">{diff_lines([f])}</pre></details>'
            for i, f in enumerate(sections)
        )
        return (
            f"<h2>Diff clean &rarr; candidate ({len(stats)} files, +{added} -{deleted}{note})</h2>"
            + table(["file", "+", "-"], rows, ' id="diff-files"')
            + f'<div id="diff">{blocks}</div>'
        )

    def decision_form(self, scope: Scope, cid: str, mine: Review | None, comment: str | None) -> str:
        def radios(field: str, label: str, current: bool | None) -> str:
            opts = "".join(
                f'<label><input type="radio" name="{field}" id="{field}-{v}" value="{v}"'
                f"{' checked' if current is not None and current == (v == 'yes') else ''}> {text}</label> "
                for v, text in (("yes", "keep"), ("no", "reject"))
            )
            return f'<fieldset id="fs-{field}"><legend>{label}</legend>{opts}</fieldset>'

        text = comment if comment is not None else (mine.comment if mine else "")
        task = f'<input type="hidden" name="task" value="{esc(scope.task)}">' if scope.task else ""
        return (
            f'<form method="post" action="/c/{esc(quote(cid, safe=""))}" id="decision">'
            + self.token_input()
            + task
            + f"<b>Your decision</b>{' (recorded; saving again replaces it)' if mine else ''}"
            + radios(
                "task_directed",
                "Task-directed: a coherent attempt at the request",
                mine and mine.task_directed,
            )
            + radios(
                "consistent",
                "Task-verifier consistent: request and hidden tests agree on completion",
                mine and mine.consistent,
            )
            + f'<label>Comment<textarea name="comment" id="comment" maxlength="4000">{esc(text)}</textarea></label>'
            + '<button type="submit" name="then" value="next" id="save-next">Save and next undecided</button> '
            + '<button type="submit" name="then" value="stay" id="save">Save</button></form>'
        )


def make_server(
    wd: WorkDir, host: str = "127.0.0.1", port: int = 0, reviewer: str | None = None
) -> ReviewServer:
    try:
        return ReviewServer(wd, host, port, reviewer)
    except OSError as exc:
        raise InputError(f"--host {host} --port {port}: cannot listen: {exc.strerror or exc}") from None


def serve(wd: WorkDir, host: str, port: int, reviewer: str | None = None) -> int:
    """Serve the review page until Ctrl-C (`reviewer`: the name it opens with)."""
    server = make_server(wd, host, port, reviewer)
    if host not in LOOPBACK:
        print(
            f"warning: listening on {host}: anyone who can reach it can record decisions under any name",
            file=sys.stderr,
        )
    who = f", reviewing as {server.reviewer}" if server.reviewer else ""
    print(f"review page: {server.url} (Ctrl-C to stop{who})", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        print("stopped", flush=True)
    finally:
        server.server_close()
    return 0

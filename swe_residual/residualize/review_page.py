"""`review --serve`: the local review page (standard library http.server, no scripts in the page).

A reviewer enters their name once (a SameSite=Strict cookie), sees every candidate with its
status, opens one (request, trajectory summary, hidden-test statuses, files, the diff with +/-
lines coloured) and records keep/reject for both criteria plus a comment. Decisions go through
review.record_review, as on the command line. Packet text is untrusted: every piece is HTML-escaped
(report/html/kit.py) and the Content-Security-Policy forbids scripts. Posts must carry the page's
per-server token and, when the browser sends one, an Origin equal to the page's own; the Host
header must name the server (DNS rebinding).
"""

from __future__ import annotations

import secrets
import sys
from http import cookies
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, quote, unquote, urlsplit

from swe_residual.errors import InputError
from swe_residual.patches import split_patch
from swe_residual.report.html.kit import diff_lines, esc, page, table
from swe_residual.residualize.filter import candidates
from swe_residual.residualize.packets import MAX_DIFF_BYTES, Packet, failing_first, read_packet
from swe_residual.residualize.records import Review
from swe_residual.residualize.review import (
    agreement,
    check_reviewer,
    counted_reviews,
    format_agreement,
    outcome,
    record_review,
)
from swe_residual.residualize.workdir import WorkDir

COOKIE = "swe_residual_reviewer"
MAX_BODY = 64 * 1024
LOOPBACK = ("127.0.0.1", "localhost")

# on top of the kit's styles: the whole of each text shown, statuses, messages, the decision form
CSS = """
pre{max-height:none}
.pending{color:var(--m)}.kept{color:var(--p)}.rejected{color:var(--f)}
.error{background:var(--fb);border:1px solid var(--f);border-radius:6px;padding:6px 10px}
.saved{background:var(--pb);border-radius:6px;padding:6px 10px}
fieldset{margin:.6em 0}textarea{width:100%;height:6em}
"""


class ReviewServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, wd: WorkDir, host: str, port: int):
        self.wd = wd
        self.token = secrets.token_urlsafe(32)
        super().__init__((host, port), Handler)
        self.host = host
        self.port = self.server_address[1]

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/"

    def allowed_hosts(self) -> set[str] | None:
        """Host headers accepted (None: any, when bound beyond loopback)."""
        if self.host not in LOOPBACK:
            return None
        return {f"{h}:{self.port}" for h in LOOPBACK}


class Handler(BaseHTTPRequestHandler):
    server: ReviewServer
    server_version = "swe-residual-review"

    def log_message(self, *args) -> None:
        pass

    # -- plumbing ---------------------------------------------------------------------------------
    def send_page(self, status: int, title: str, body: str, headers: dict[str, str] | None = None) -> None:
        data = page(title, body, css=CSS, policy=False).encode()   # the policy is the header below
        self.send_response(status)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; "
                         "form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
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
        self.send_page(status, "Error", f'<p class="error">{esc(message)}</p><p><a href="/">Back to the list</a></p>')

    def host_ok(self) -> bool:
        allowed = self.server.allowed_hosts()
        return allowed is None or (self.headers.get("Host") or "") in allowed

    def reviewer(self) -> str | None:
        jar = cookies.SimpleCookie()
        try:
            jar.load(self.headers.get("Cookie") or "")
        except cookies.CookieError:
            return None
        if COOKIE not in jar:
            return None
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

    # -- routes -----------------------------------------------------------------------------------
    def do_GET(self) -> None:
        if not self.host_ok():
            return self.fail(421, "refused: unexpected Host header")
        path = urlsplit(self.path).path
        query = parse_qs(urlsplit(self.path).query)
        who = self.reviewer()
        try:
            if who is None:
                return self.send_page(200, "Stage III review", self.name_form())
            if path == "/":
                return self.send_page(200, "Stage III review", self.list_page(who))
            if path.startswith("/c/"):
                return self.candidate_page(unquote(path[3:]), who, saved="saved" in query)
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
                return self.send_page(400, "Stage III review", f'<p class="error">{esc(exc)}</p>' + self.name_form())
            return self.redirect("/", {"Set-Cookie": f"{COOKIE}={quote(name, safe='')}; Path=/; HttpOnly; "
                                                     "SameSite=Strict"})
        if path == "/signout":
            return self.redirect("/", {"Set-Cookie": f"{COOKIE}=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict"})
        who = self.reviewer()
        if who is None:
            return self.fail(403, "enter your name first")
        if path.startswith("/c/"):
            cid = unquote(path[3:])
            choice = {k: data.get(k) for k in ("task_directed", "consistent")}
            if any(v not in ("yes", "no") for v in choice.values()):
                return self.candidate_page(cid, who, error="choose keep or reject for both criteria",
                                           status=400, comment=data.get("comment", ""))
            try:
                record_review(self.server.wd, cid, who, choice["task_directed"] == "yes",
                              choice["consistent"] == "yes", data.get("comment", "").replace("\r\n", "\n"))
            except InputError as exc:
                return self.candidate_page(cid, who, error=str(exc), status=409, comment=data.get("comment", ""))
            return self.redirect(f"/c/{quote(cid, safe='')}?saved=1")
        self.fail(404, "no such page")

    # -- pages ------------------------------------------------------------------------------------
    def token_input(self) -> str:
        return f'<input type="hidden" name="token" value="{esc(self.server.token)}">'

    def name_form(self) -> str:
        return ("<h1>Stage III review</h1><p>Enter your name once; your decisions are recorded under it.</p>"
                f'<form method="post" action="/name" id="name-form">{self.token_input()}'
                '<label>Reviewer name <input name="name" id="name" required maxlength="100"></label> '
                '<button type="submit" id="name-submit">Start reviewing</button></form>')

    def header(self, who: str) -> str:
        return (f'<form method="post" action="/signout" style="float:right">{self.token_input()}'
                f'Reviewing as <b id="who">{esc(who)}</b> <button type="submit">Change name</button></form>')

    def list_page(self, who: str) -> str:
        wd = self.server.wd
        counted = counted_reviews(wd)
        rows = []
        for c in candidates(wd):
            rs = counted.get(c.id, [])
            status = outcome(rs)
            mine = next((r for r in rs if r.reviewer == who), None)
            names = ", ".join(esc(r.reviewer) + ("" if status == "pending" else f" ({'keep' if r.keep else 'reject'})")
                              for r in rs) or "nobody yet"
            rows.append(f'<tr data-candidate="{esc(c.id)}"><td><a href="/c/{esc(quote(c.id, safe=""))}">'
                        f'{esc(c.id)}</a></td><td>{esc(c.track)}/{esc(c.task)}</td>'
                        f'<td>{esc(c.predecessor.agent)} ({esc(c.predecessor.model_family)})</td>'
                        f'<td class="status {status}">{status}</td><td>{names}</td>'
                        f'<td class="mine">{"-" if mine is None else ("keep" if mine.keep else "reject")}</td></tr>')
        ag = agreement(wd)
        agree = f"<pre id='agreement'>{esc(chr(10).join(format_agreement(ag)))}</pre>" if ag["candidates"] else ""
        return (self.header(who) + "<h1>Stage III review</h1>"
                "<p>Keep a candidate only if it is (a) <b>task-directed</b>: a coherent attempt at the request, not "
                "unrelated or incidental changes, and (b) <b>task-verifier consistent</b>: the request and the hidden "
                "tests agree on what completion means. Each candidate needs two reviewers.</p>"
                + table(["candidate", "task", "predecessor", "status", "reviewed by", "your decision"], rows,
                        ' id="candidates"') + agree)

    def candidate_page(self, cid: str, who: str, *, saved: bool = False, error: str | None = None,
                       status: int = 200, comment: str | None = None) -> None:
        wd = self.server.wd
        if cid not in {c.id for c in candidates(wd)}:
            return self.fail(404, f"no candidate {cid}")
        rs = counted_reviews(wd).get(cid, [])
        mine = next((r for r in rs if r.reviewer == who), None)
        p = read_packet(wd, cid)
        body = [self.header(who), '<p><a href="/">All candidates</a></p>', f"<h1>Candidate {esc(cid)}</h1>"]
        if saved:
            body.append('<p class="saved" id="saved">Decision saved.</p>')
        if error:
            body.append(f'<p class="error" id="error">{esc(error)}</p>')
        body.append(f'<p>Status: <b class="status {outcome(rs)}">{outcome(rs)}</b>; reviewed by '
                    f'{esc(", ".join(r.reviewer for r in rs) or "nobody yet")}.</p>')
        if outcome(rs) != "pending":
            body.append("<ul id='decisions'>" + "".join(
                f"<li>{esc(r.reviewer)}: task-directed {'yes' if r.task_directed else 'no'}, consistent "
                f"{'yes' if r.consistent else 'no'}{' - ' + esc(r.comment) if r.comment else ''}</li>" for r in rs)
                + "</ul>")
        body.append(self.packet_html(p) if p is not None else
                    '<p class="error">No review packet yet: run <code>swe-residual residualize review WORKDIR'
                    "</code> to write it.</p>")
        body.append(self.decision_form(cid, mine, comment))
        self.send_page(status, f"Review {cid}", "".join(body))

    @staticmethod
    def packet_html(p: Packet) -> str:
        failing = sum(1 for s in p.tests.values() if s != "passed")
        tests = "".join(f"<li>{esc(s)}: <code>{esc(t)}</code></li>"
                        for t, s in sorted(p.tests.items(), key=failing_first)) \
            or "<li>no per-test statuses recorded</li>"
        kind = f"model {esc(p.summary.model)}" if p.summary.kind == "model" else "deterministic digest"
        note = f" (first {MAX_DIFF_BYTES} bytes of {p.diff_bytes})" if p.diff_truncated else f" ({p.diff_bytes} bytes)"
        return (f"<p>Track <b>{esc(p.track)}</b>, task <b>{esc(p.task)}</b>, predecessor "
                f"{esc(p.predecessor.get('agent', '?'))} ({esc(p.predecessor.get('model_family', '?'))})</p>"
                f"<h2>Request</h2><pre id='request'>{esc(p.request)}</pre>"
                f"<h2>Trajectory summary ({kind})</h2><pre id='summary'>{esc(p.summary.text)}</pre>"
                f"<h2>Hidden tests ({failing} of {len(p.tests)} not passing)</h2><ul id='tests'>{tests}</ul>"
                f"<h2>Files touched ({len(p.files)})</h2><ul id='files'>"
                + "".join(f"<li><code>{esc(f)}</code></li>" for f in p.files)
                + f"</ul><h2>Diff clean &rarr; candidate{note}</h2>"
                + f"<pre class='diff' id='diff'>{diff_lines(split_patch(p.diff))}</pre>")

    def decision_form(self, cid: str, mine: Review | None, comment: str | None) -> str:
        def radios(field: str, label: str, current: bool | None) -> str:
            opts = "".join(
                f'<label><input type="radio" name="{field}" id="{field}-{v}" value="{v}"'
                f'{" checked" if current is not None and current == (v == "yes") else ""}> {text}</label> '
                for v, text in (("yes", "keep"), ("no", "reject")))
            return f"<fieldset><legend>{label}</legend>{opts}</fieldset>"

        text = comment if comment is not None else (mine.comment if mine else "")
        return (f'<h2>Your decision</h2><form method="post" action="/c/{esc(quote(cid, safe=""))}" id="decision">'
                + self.token_input()
                + radios("task_directed", "Task-directed: a coherent attempt at the request",
                         mine and mine.task_directed)
                + radios("consistent", "Task-verifier consistent: request and hidden tests agree on completion",
                         mine and mine.consistent)
                + f'<label>Comment<textarea name="comment" id="comment" maxlength="4000">{esc(text)}</textarea></label>'
                + '<button type="submit" id="save">Save decision</button></form>')


def make_server(wd: WorkDir, host: str = "127.0.0.1", port: int = 0) -> ReviewServer:
    try:
        return ReviewServer(wd, host, port)
    except OSError as exc:
        raise InputError(f"--host {host} --port {port}: cannot listen: {exc.strerror or exc}") from None


def serve(wd: WorkDir, host: str, port: int) -> int:
    """Serve the review page until Ctrl-C."""
    server = make_server(wd, host, port)
    if host not in LOOPBACK:
        print(f"warning: listening on {host}: anyone who can reach it can record decisions under any name",
              file=sys.stderr)
    print(f"review page: {server.url} (Ctrl-C to stop)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        print("stopped", flush=True)
    finally:
        server.server_close()
    return 0

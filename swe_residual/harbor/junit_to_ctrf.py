"""JUnit XML in a verifier's logs dir -> CTRF JSON (`ctrf.json`), for exported Harbor tasks.

Harbor grades from the reward file only and keeps the verifier's logs dir (`/logs/verifier`);
per-test results travel as CTRF (`{"results": {"tool", "summary", "tests": [{"name", "status",
...}]}}`), which `swe-residual import harbor-job` reads. Tasks whose verifier writes JUnit XML
(the demo track's pytest) get this file in their exported `tests/.swe-residual/`; the exported
`tests/test.sh` runs the task's own verifier, then

    python3 -I junit_to_ctrf.py LOGS_DIR NAME...

with the JUnit files the task declares (`Task.junit_reports`, the names our own grading reads).
The statuses are exactly the ones our grading reads from the same files (`verdicts.read_statuses`:
the declared files in order, a later one overriding an earlier one; within a file a test reported
twice keeps its worst status; `<error>` counts as failed; a link or non-file where a report belongs
is unreadable), one CTRF test per test id, so a trial imported from Harbor carries the per-test
detail a local run of the same case has.

Runs inside the task's environment with its own python3 (stdlib only, Python >= 3.6); no file is
read past 16 MiB; ctrf.json is written to a temporary file and renamed over it, so a link planted
there is replaced, never followed. Exit status: 0 written (or none of the files exists: nothing
written), 1 a report unreadable (nothing written), 2 usage.
"""

import json
import os
import stat
import sys
import time
import xml.etree.ElementTree as ET

MAX_XML = 16 << 20
MAX_MESSAGE = 2000
TOOL = "junit-xml (converted by swe-residual export harbor)"


def _read_report(path):
    """The bytes of a declared report, None when it does not exist; a link, a directory or any
    other non-file where it belongs, or one over MAX_XML, is unreadable (ValueError)."""
    name = os.path.basename(path)
    if not os.path.lexists(path):
        return None
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        raise ValueError("unreadable report %s: not a regular file" % name) from None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            raise ValueError("unreadable report %s: not a regular file" % name)
        data = fh.read(MAX_XML + 1)
    if len(data) > MAX_XML:
        raise ValueError("unreadable report %s: over %d MiB" % (name, MAX_XML >> 20))
    return data


def junit_tests(data):
    """[(test id, status, message, suite, duration ms)] of one JUnit report, statuses as
    verdicts.parse_junit gives them: a test reported twice keeps its worst status."""
    root = ET.fromstring(data)
    order, tests = [], {}
    for case in root.iter("testcase"):
        cls, name = case.get("classname") or "", case.get("name") or ""
        test_id = "%s.%s" % (cls, name) if cls else name
        bad = case.find("failure")
        if bad is None:
            bad = case.find("error")
        if bad is not None:
            status = "failed"
        elif case.find("skipped") is not None:
            status = "skipped"
        else:
            status = "passed"
        message = None
        if bad is not None:
            message = (bad.get("message") or bad.text or "").strip()[:MAX_MESSAGE] or None
        try:
            duration = int(round(float(case.get("time") or 0) * 1000))
        except ValueError:
            duration = 0
        if test_id not in tests:
            order.append(test_id)
        elif tests[test_id][0] == "failed":
            continue
        tests[test_id] = (status, message, cls or None, duration)
    return [(t,) + tests[t] for t in order]


def ctrf_report(tests, tool=TOOL, start_ms=0, stop_ms=0):
    """A CTRF document of [(id, status, message, suite, duration ms)], one entry per id."""
    entries = []
    for test_id, status, message, suite, duration in tests:
        entry = {"name": test_id, "status": status, "duration": duration}
        if message:
            entry["message"] = message
        if suite:
            entry["suite"] = suite
        entries.append(entry)
    count = lambda s: sum(1 for e in entries if e["status"] == s)
    summary = {
        "tests": len(entries),
        "passed": count("passed"),
        "failed": count("failed"),
        "skipped": count("skipped"),
        "pending": 0,
        "other": 0,
        "start": start_ms,
        "stop": stop_ms,
    }
    return {"results": {"tool": {"name": tool}, "summary": summary, "tests": entries}}


def convert(logs_dir, names):
    """The CTRF document of the declared JUnit files of logs_dir (None when none exists)."""
    merged, order, found = {}, [], False
    for name in names:
        if os.path.basename(name) != name or name in ("", ".", ".."):
            raise ValueError("%r: not a file name in the logs dir" % name)
        data = _read_report(os.path.join(logs_dir, name))
        if data is None:
            continue
        found = True
        try:
            tests = junit_tests(data)
        except (ET.ParseError, RecursionError) as exc:
            raise ValueError("unreadable JUnit report %s: %s" % (name, str(exc)[:200])) from None
        for t in tests:  # a later file overrides an earlier one (as verdicts.read_statuses)
            if t[0] not in merged:
                order.append(t[0])
            merged[t[0]] = t
    if not found:
        return None
    now = int(time.time() * 1000)
    return ctrf_report([merged[t] for t in order], start_ms=now, stop_ms=now)


def write_ctrf(logs_dir, report):
    target = os.path.join(logs_dir, "ctrf.json")
    tmp = os.path.join(logs_dir, ".ctrf.json.%d.tmp" % os.getpid())
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
    with os.fdopen(fd, "w") as fh:
        json.dump(report, fh, indent=1)
        fh.write("\n")
    os.replace(tmp, target)


def main(argv):
    if len(argv) < 3:
        sys.stderr.write("usage: junit_to_ctrf.py LOGS_DIR JUNIT_FILE...\n")
        return 2
    logs_dir, names = argv[1], argv[2:]
    try:
        report = convert(logs_dir, names)
    except (OSError, ValueError) as exc:
        sys.stderr.write("swe-residual: no ctrf.json: %s\n" % exc)
        return 1
    if report is None:
        sys.stderr.write("swe-residual: no %s in %s; no ctrf.json\n" % (", ".join(names), logs_dir))
        return 0
    write_ctrf(logs_dir, report)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

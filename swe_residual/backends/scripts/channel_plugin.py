"""swe-residual's report channel: a pytest plugin the harness puts into a verifier environment after
the agent stopped, under a module name drawn per verification, and loads with `-p` (PYTEST_ADDOPTS,
its directory on PYTHONPATH); the task's test command is not changed.

It writes one JSON line per test phase to the fifo named by $SWE_RESIDUAL_CHANNEL, which the host
reads while the tests run (swe_residual/run/grading_channel.py reads the lines):

  {"hello": pid, "pytest": version, "plugins": [...]}       once per pytest process
  {"id": nodeid, "when": setup|call|teardown, "outcome": passed|failed|skipped}
  {"id": nodeid, "when": "collect", "outcome": "failed"}    a file or class that failed to collect
  {"end": exit status}                                      at the end of the session

The outcome is read from the test call's own exception in a makereport wrapper that runs inside
the other plugins' wrappers, not from the report object: a report that a hook, code at exit or a
process outliving pytest rewrites afterwards differs from what was streamed. Code under test runs
in this same interpreter, so code that targets the channel itself can fool it; that takes the
capabilities the integrity flags signal (reflection, framework patches), and the hardened re-grade
does not load the agent's conftest.py files at all. With pytest-xdist the workers have no channel
and the controller relays the reports it gets.

The fifo is opened when pytest imports this module (before any conftest.py), its path taken off
the environment, its descriptor not inheritable by the tests' subprocesses; only the first session
of the process reports (not a pytest that a test runs in-process). Only the standard library and
pytest are imported: this file runs under whatever interpreter the task's tests use (pytest 6+).
"""

import json
import os
import stat

import pytest


def _take_descriptor():
    path = os.environ.pop("SWE_RESIDUAL_CHANNEL", "")
    if not path:
        return None
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)  # not inheritable (Python's default)
    except OSError:
        return None
    try:
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            raise OSError("not the harness's fifo")
        os.set_blocking(fd, True)
        return fd
    except OSError:
        os.close(fd)
        return None


_fd = _take_descriptor()
_config = None  # the session that reports


def _emit(record):
    global _fd
    if _fd is None:
        return
    data = (json.dumps(record, separators=(",", ":"), default=str) + "\n").encode("utf-8", "replace")
    try:
        while data:
            data = data[os.write(_fd, data) :]
    except OSError:  # the host stopped reading (its limit): the rest is not sent
        _fd = None


def _status(call):
    if call.excinfo is None:
        return "passed"
    if call.excinfo.errisinstance(pytest.skip.Exception):
        return "skipped"
    return "failed"


def _plugins(config):
    names = set()
    try:
        for _, dist in config.pluginmanager.list_plugin_distinfo():
            names.add(str(getattr(dist, "project_name", None) or dist.metadata.get("name", "?")))
    except Exception:  # noqa: BLE001 - a listing is a courtesy, never a reason to fail
        pass
    return sorted(names)


def pytest_configure(config):
    global _config
    if _config is None:
        _config = config
        _emit({"hello": os.getpid(), "pytest": pytest.__version__, "plugins": _plugins(config)})


@pytest.hookimpl(hookwrapper=True, trylast=True)
def pytest_runtest_makereport(item, call):
    yield
    if item.config is _config:
        _emit({"id": item.nodeid[:2000], "when": call.when, "outcome": _status(call)})


@pytest.hookimpl(hookwrapper=True, trylast=True)
def pytest_make_collect_report(collector):
    outcome = yield
    report = outcome.get_result()
    if collector.config is _config and report is not None and report.outcome == "failed":
        _emit({"id": collector.nodeid[:2000], "when": "collect", "outcome": "failed"})


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_logreport(report):
    if getattr(report, "node", None) is not None:  # xdist: a worker's report, relayed
        _emit({"id": report.nodeid[:2000], "when": report.when, "outcome": report.outcome, "relayed": True})


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    if session.config is _config:
        _emit({"end": int(exitstatus)})

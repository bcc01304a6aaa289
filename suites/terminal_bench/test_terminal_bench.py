"""Terminal-Bench track: machine tasks in Terminal-Bench 2's Harbor layout and their Residual
States (whole containers: files, installed software, configuration, live processes).

Every (agent, task, start, state) is one case; see plugins/options.py for the options. Docker only
(docs/machine-track.md).
"""

import pytest

from swe_residual.run.attempt import explain_failure

TRACK = "terminal_bench"


def test_case(swe_result):
    if swe_result.outcome != 1:
        pytest.fail(explain_failure(swe_result), pytrace=False)

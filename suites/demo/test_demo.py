"""Demo track: small Python repositories with handwritten Residual States.

Every (agent, task, start, state) is one case; see plugins/options.py for the options.
"""

import pytest

from swe_residual.run.attempt import explain_failure

TRACK = "demo"


def test_case(swe_result):
    if swe_result.outcome != 1:
        pytest.fail(explain_failure(swe_result), pytrace=False)

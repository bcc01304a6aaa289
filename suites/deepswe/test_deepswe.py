"""DeepSWE track: DeepSWE v1.1 repository tasks (Harbor format, separate verifier) and their
Residual States. Neither ships here: `swe-residual tasks fetch deepswe` and `swe-residual states
fetch SOURCE` put them in the cache, where runs find them (README.md); without either, naming this
suite is a usage error (exit 4), not a skip.

Every (agent, task, start, state) is one case; see plugins/options.py for the options.
"""

import pytest

from swe_residual.run.attempt import explain_failure

TRACK = "deepswe"


def test_case(swe_result):
    if swe_result.outcome != 1:
        pytest.fail(explain_failure(swe_result), pytrace=False)

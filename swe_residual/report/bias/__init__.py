"""Acceptance bias (docs/metrics.md, Table 4), by job:

* kept: what a patch changed and how much of the predecessor's lines a final patch keeps;
* shell, exposure: what an agent's actions showed it (files opened, git status/diff run);
* measures: the Table 4 numbers from an agent's runs (report/aggregates.py gathers them from the
  columns), the manifest, patches and trajectories.

The names below are the package's public API (report, metrics and tests import them from here).
"""

from swe_residual.report.bias.kept import (
    FileDiff,
    changed_paths,
    kept_fraction,
    lcs_length,
    parse_patch,
    read_regular_file,
)
from swe_residual.report.bias.measures import (
    AgentRuns,
    BiasInputs,
    break_rate,
    by_task,
    initially_failing_clean,
    initially_failing_residual,
    inspection_rate,
    kept,
    kept_split,
    left_out_files,
    na,
    repair_rate,
    same_failing,
    steps_ratio,
    task_mean,
    tokens_ratio,
)
from swe_residual.shell.exposure import (
    Facts,
    FileSet,
    Output,
    analyze,
    exposed_files,
    inspected,
    opened_any,
    path_matches,
    runs_git,
    session_cwd,
)

__all__ = [
    "AgentRuns",
    "BiasInputs",
    "Facts",
    "FileDiff",
    "FileSet",
    "Output",
    "analyze",
    "break_rate",
    "by_task",
    "changed_paths",
    "exposed_files",
    "initially_failing_clean",
    "initially_failing_residual",
    "inspected",
    "inspection_rate",
    "kept",
    "kept_fraction",
    "kept_split",
    "lcs_length",
    "left_out_files",
    "na",
    "opened_any",
    "parse_patch",
    "path_matches",
    "read_regular_file",
    "repair_rate",
    "runs_git",
    "same_failing",
    "session_cwd",
    "steps_ratio",
    "task_mean",
    "tokens_ratio",
]

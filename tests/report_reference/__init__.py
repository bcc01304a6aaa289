"""The report as it was before the columnar rewrite (swe_residual/report/tables.py, metrics.py, bias/
and results.py's row reader), kept verbatim with its imports pointed here: the oracle that
tests/test_report_columns.py compares the columnar report against, key by key (as
tests/stats_reference.py keeps the old statistics). The trajectory scan (shell/exposure.py) and
reader (trajectory.py) are the project's own: the columnar report did not change them."""

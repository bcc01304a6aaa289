"""The report as it was before the columnar rewrite (swe_residual/report/tables.py, metrics.py, bias/,
results.py's row reader, shell/exposure.py's scan, trajectory.py's reader), kept verbatim with
its imports pointed here: the oracle that tests/test_report_columns.py compares the columnar
report against, key by key (as tests/stats_reference.py keeps the old statistics)."""

"""The Docker backend: one container per environment, built from the task's own images.

Jobs are split by module: backend.py (the Backend: images, environments, limits), engine.py
(connection, labels, sweeping, exec), images.py (clean, residual and verifier images),
environment.py (one container), bootstrap.py (starting dockerd, the offline base images). The
engine must run on this host (the request is bind-mounted) and is never started by the backend:
`swe-residual images bootstrap` does that. Machine-track tasks (whole containers with live
processes) are replayed, snapshotted and restored by machine.py, CRIU probed by criu.py.

This package face imports nothing, so the bootstrap (run by a bare system Python in CI, before
any dependency is installed) stays importable on its own.
"""

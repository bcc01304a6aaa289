"""The backends there are: name -> the class that implements it, as "module:class".

The one list of backend names: track.toml's default_backend, the CLI's and the plugin's --backend
choices and the plan read it, and swe_residual.backends.backend_class imports a backend's module
only when it is used (option parsing and the bootstrap stay light). A data contract at the
ground floor, so the track config can check a name without importing any backend.
"""

BACKEND_CLASSES: dict[str, str] = {
    "local": "swe_residual.backends.local:LocalBackend",
    "docker": "swe_residual.backends.docker.backend:DockerBackend",
}
BACKENDS = tuple(BACKEND_CLASSES)

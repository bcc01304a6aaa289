"""The `agents` extra (mini-swe-agent, LiteLLM): what needs it, whether it is installed, and
LiteLLM imported without its banners.

Model agents import these packages only when they run, so the base install stays light; a missing
package is a usage error that names the option the user typed (`--agent X`, `--predecessor X`)
and the install command. LiteLLM prints a red "Provider List" line (and "Give Feedback" hints)
for every model name it cannot place, e.g. the scripted models' own names in its cost lookup:
noise on every command that runs a model, so it is switched off where LiteLLM is imported.
"""

from __future__ import annotations

import importlib.util
import logging
from types import ModuleType

EXTRA = "agents"
INSTALL = "pip install -e '.[agents]'"
# harness -> the packages (import names, what a user calls them) it imports when it runs
HARNESS_PACKAGES: dict[str, tuple[tuple[str, str], ...]] = {
    "mini-swe-agent": (("minisweagent", "mini-swe-agent"), ("litellm", "LiteLLM")),
    "terminus": (("litellm", "LiteLLM"),),
}


def needs_extra(harness: str) -> bool:
    return harness in HARNESS_PACKAGES


def missing_packages(harness: str) -> list[str]:
    """The packages of the extra that the harness needs and that are not installed (not imported)."""
    missing = []
    for module, label in HARNESS_PACKAGES.get(harness, ()):
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(label)
    return missing


def extra_missing(option: str, name: str, harness: str, exc: BaseException | None = None) -> str:
    """The usage error of a model agent whose packages are not installed."""
    labels = " and ".join(label for _, label in HARNESS_PACKAGES.get(harness, ())) or "its packages"
    why = f": {exc}" if exc is not None else ""
    return (
        f"{option} {name}: the {harness} harness needs the `{EXTRA}` extra ({labels}), which is not "
        f"installed{why}; install it with {INSTALL}"
    )


def quiet_litellm() -> ModuleType:
    """Import LiteLLM with its banners and debug hints off (they are printed, not logged)."""
    import litellm

    litellm.suppress_debug_info = True
    for logger in ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy"):
        logging.getLogger(logger).setLevel(logging.ERROR)
    return litellm

"""Real Terminal-Bench 2.1 task dirs run unchanged through the machine track (issue 31): their
published bytes and task digests, and one suite run per task from the clean start in which the
task's own reference solution passes (outcome 1) and the untouched machine fails (outcome 0).

tests/fixtures/real/terminal-bench/PROVENANCE.md says where each file comes from; only
environment/Dockerfile is ours, an offline stand-in for the published image."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from swe_residual.tracks import task_digest

from .drivers import ROOT, records, run_suite

REAL = ROOT / "tests" / "fixtures" / "real" / "terminal-bench"

# task -> (published task digest, {file: SHA-256 of the published bytes})
PUBLISHED = {
    "openssl-selfsigned-cert": (
        "sha256:d4afa2bd2a9ba1420db8d6cfde42ffdb4873ae2d955c35014e8da94444c83302",
        {
            "README.md": "5dfa88651890cda06fa2a25babd3b813818767635e88bbabecc8305d5bb3942f",
            "task.toml": "75c8913f0fa15890786c11999cde920b8bfc10d4ce8a14edf1e76985a2ac5800",
            "instruction.md": "38054a3371f7c2c853478a2f9af0bff858437d5b28a9a07483238f06e566921f",
            "solution/solve.sh": "58cf3c844e907745cd81fb4bd75efb3d080e2f0e82b589c56c954ae6e1756510",
            "tests/test.sh": "4770437ea96c3cc84684b4f99d55fb148fcac09f9ea1e8ef49de487716e6c334",
            "tests/test_outputs.py": "90970bb3c372e8e7fb6bb9ac5f649ba73eb38e1a5ea2e922a9057a72b6b4192d",
            "environment/published.Dockerfile": "f590b523038be43afcaf5291d7b9e8ed1333c48d9994e77b8dee2f2c352f0f40",
        },
    ),
    "build-pmars": (
        "sha256:63f0449b276f081986740c941ea9372068b310a02b062c1e5e3400f575241893",
        {
            "README.md": "faf19658ef0ea11f1a6208ea0d561d2a0dbc4be19c653c7f4ed9b6255dac12f0",
            "task.toml": "7ee2eac27b99fd462e0760552a430454db693f86608af5bb570b020270e4c9cd",
            "instruction.md": "dd4a3aa762e6b3c09e67bd7f61d9b6afbe379dcd7297c2c0ebe2e9bd0082215e",
            "solution/solve.sh": "111b4e532ec411c9826cd67309f39efac21063e3a76d5cb268e62ce5fadc713f",
            "tests/test.sh": "4770437ea96c3cc84684b4f99d55fb148fcac09f9ea1e8ef49de487716e6c334",
            "tests/test_outputs.py": "d9d2796ddc19cf8159670567e174ea377e2bce675bf3451d5951c045b01f4e85",
            "environment/warriors/flashpaper.red": "ad965bf840c3f3849abc18adc89d58f3fe51209e43ae3f7b9a9cb48452374fe9",
            "environment/warriors/rave.red": "b4c8acf763957da9de0ec8568d765214ef9e8271aac9b51bb1ab09753e3afb66",
            "environment/published.Dockerfile": "ff0a9f766151b6304a33b8fe8787dc27d75f6ea679eec4e9a4f2c8876fe08b25",
        },
    ),
    "configure-git-webserver": (
        "sha256:e3dc712acfecdb1338a889f86c97b37422c3778351253f9aca4236e895fdb36e",
        {
            "README.md": "d1db8dfb8883e39adf902eced862bfd7bf8240f2fc7eb6364a74d77b09b899b5",
            "task.toml": "ebb40d72f689512cbd90d865d88ef966b6665ab215544f9247b898b7fa94751b",
            "instruction.md": "62151b7371bc364277a3c118bba755334c640fb0cefc7a5af106e6e763cf1d97",
            "solution/solve.sh": "921ff9c1dabdbd130e1a6616c24b236b7ba9a1517b3dff4c33fe8c8a129e2e7a",
            "tests/test.sh": "afafc3ffdaf911f7a93003c0746f217188099c174e5d3eb7dada17133df15895",
            "tests/test_outputs.py": "526aee3dfe952cc4c7574361012712e389d6fba7222c005fc3e939fc53346b37",
            "tests/verify.sh": "49a02f5267a892824e023ce05eb1ac6132a44854cc47f20feba312c4a3d05568",
            "environment/published.Dockerfile": "8c87039a43581841b7ef11d80c4ff1a5c5f43011877e167403063d55435aaa19",
        },
    ),
}


def published_tree(task: str, dest: Path) -> Path:
    """The task dir as published: its published environment/Dockerfile in place of ours."""
    out = dest / task
    shutil.copytree(REAL / task, out)
    (out / "environment" / "published.Dockerfile").replace(out / "environment" / "Dockerfile")
    return out


@pytest.mark.parametrize("task", sorted(PUBLISHED))
def test_the_files_are_the_published_bytes_and_give_the_published_digest(task, tmp_path):
    digest, files = PUBLISHED[task]
    for rel, sha in files.items():
        assert hashlib.sha256((REAL / task / rel).read_bytes()).hexdigest() == sha, rel
    assert task_digest(published_tree(task, tmp_path)) == digest


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.parametrize("task", sorted(PUBLISHED))
def test_the_reference_solution_passes_and_the_clean_machine_fails(task, tmp_path, bookworm_image):
    tasks = tmp_path / "tasks"
    shutil.copytree(REAL / task, tasks / task)
    run = tmp_path / f"real-tb-{task}"  # containers are labelled with the run dir's name
    proc = run_suite(
        "--tasks-dir",
        str(tasks),
        suite="suites/terminal_bench",
        run_dir=run,
        start="clean",
        workers=2,
        agents=["oracle", "nop"],
        timeout=3600,  # measured: 24 min for configure-git-webserver on 2 CPUs at load 25
    )
    recs = records(run, by="agent", missing_ok=True)
    out = proc.stdout[-3000:] + proc.stderr[-2000:]
    assert set(recs) == {"oracle", "nop"}, out
    assert (recs["oracle"]["outcome"], recs["oracle"]["verdict"], recs["oracle"]["rule"]) == (
        1,
        "pass",
        "verdict",
    ), out
    assert (recs["nop"]["outcome"], recs["nop"]["verdict"], recs["nop"]["rule"]) == (0, "fail", "verdict"), (
        out
    )

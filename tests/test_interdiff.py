"""The agent's change to the inherited work, worked out from two patches against one base.

Checked against git itself: each demo state and the reference solution applied to the real base
repository, then `git diff --no-index` between the two trees; the '+' and '-' lines must be the
ones interdiff finds without the base.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from swe_residual.patches import ADD, DEL, NOTE, split_patch
from swe_residual.report.html.interdiff import interdiff

ROOT = Path(__file__).resolve().parent.parent


def _git(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)


def _lines(files, kind):
    return sorted(line[1:] for f in files for line, k in zip(f.lines, f.kinds) if k == kind)


DEMO = [s for s in yaml.safe_load((ROOT / "states.yaml").read_text())["states"] if s["track"] == "demo"]


@pytest.mark.parametrize("state", DEMO, ids=[s["id"] for s in DEMO])
def test_matches_git_on_every_demo_state(state, tmp_path):
    task = ROOT / "suites/demo/tasks" / state["task"]
    solution = task / "solution" / "solution.patch"
    for name, patch in (("S", ROOT / state["artifact"]["patch"]), ("F", solution)):
        shutil.copytree(task / "environment" / "repo", tmp_path / name)
        assert _git("apply", "--binary", str(patch), cwd=tmp_path / name).returncode == 0
    real = split_patch(_git("diff", "--no-index", "S", "F", cwd=tmp_path).stdout)
    got = interdiff(
        split_patch((ROOT / state["artifact"]["patch"]).read_text()), split_patch(solution.read_text())
    )
    assert got.not_comparable == {}
    assert _lines(got.files, ADD) == _lines(real, ADD) and _lines(got.files, DEL) == _lines(real, DEL)
    assert sorted(f.path for f in got.files) == sorted(
        f.path.split("/", 1)[1] for f in real
    )  # F/x, or S/x when deleted


BASE = [f"line {i}" for i in range(1, 21)]


def _patch(tmp: Path, name: str, edit, base: list[str] = BASE, context: int = 3) -> str:
    """A git patch (-U<context>) of `edit` applied to a repository holding f.txt = base."""
    work = tmp / name
    work.mkdir()
    _git("init", "-q", cwd=work)
    _set(work / "f.txt", base)
    _git("add", "-A", cwd=work)
    _git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base", cwd=work)
    edit(work)
    _git("add", "-A", cwd=work)
    return _git("diff", "--cached", "--binary", f"-U{context}", "HEAD", cwd=work).stdout


def _set(path: Path, lines: list[str]) -> None:
    path.write_text("\n".join(lines) + "\n")


def _edit(lines: list[str], at: int, text: str):
    def go(w: Path) -> None:
        changed = lines.copy()
        changed[at] = text
        _set(w / "f.txt", changed)

    return go


def test_hand_made_cases(tmp_path):
    # the state changed line 3 and added new.py; the agent kept line 3's change, changed line 15
    # and deleted new.py: the diff state -> final is line 15 and new.py's removal, nothing else
    s = BASE.copy()
    s[2] = "line 3 (state)"
    state = _patch(tmp_path, "s", lambda w: (_set(w / "f.txt", s), (w / "new.py").write_text("x = 1\n")))
    final = _patch(tmp_path, "f", _edit(s, 14, "line 15 (agent)"))
    d = interdiff(split_patch(state), split_patch(final))
    assert [x.path for x in d.files] == ["f.txt", "new.py"] and d.unchanged == [] and d.not_comparable == {}
    body = d.files[0]
    assert _lines([body], DEL) == ["line 15"] and _lines([body], ADD) == ["line 15 (agent)"]
    # its 3 lines of context each side are lines the final patch shows: real text, no note
    assert [ln for ln, k in zip(body.lines, body.kinds) if k == NOTE] == []
    assert [ln for ln in body.lines if ln.startswith(" ")] == [f" line {i}" for i in (12, 13, 14, 16, 17, 18)]
    assert _lines([d.files[1]], DEL) == ["x = 1"] and d.files[1].added == []
    # kept exactly: the same patch twice -> nothing changed, both files listed as kept
    same = interdiff(split_patch(state), split_patch(state))
    assert same.files == [] and same.unchanged == ["f.txt", "new.py"]
    # the agent reverted everything: the state's changes undone
    back = interdiff(split_patch(state), [])
    assert _lines(back.files, DEL) == ["line 3 (state)", "x = 1"] and _lines(back.files, ADD) == ["line 3"]


def test_lines_neither_patch_shows_are_one_note(tmp_path):
    # patches without context (-U0): the state changed line 10, the final state has line 10 as in
    # the base and line 12 changed. State -> final: line 10 back, line 12 changed; the context
    # before and between them (lines 7-9, 11) is in neither patch: notes of 3 and 1 lines (the
    # stand-in base ends at the last line a patch shows, so no context follows line 12)
    state = _patch(tmp_path, "s", _edit(BASE, 9, "ten (state)"), context=0)
    final = _patch(tmp_path, "f", _edit(BASE, 11, "twelve (agent)"), context=0)
    (f,) = interdiff(split_patch(state), split_patch(final)).files
    assert _lines([f], DEL) == ["line 12", "ten (state)"] and _lines([f], ADD) == [
        "line 10",
        "twelve (agent)",
    ]
    notes = [ln for ln, k in zip(f.lines, f.kinds) if k == NOTE]
    assert notes == [
        "\u22ef 3 unchanged lines neither patch shows",
        "\u22ef 1 unchanged line neither patch shows",
    ]
    assert [ln for ln in f.lines if ln.startswith("@@")] == ["@@ -7,6 +7,6 @@"]


def test_disagreeing_patches_and_binaries_are_not_guessed(tmp_path):
    state = _patch(tmp_path, "s", _edit(BASE, 0, "other"))
    # a "final" patch claiming another base line 1
    final = state.replace("-line 1\n", "-something else\n")
    d = interdiff(split_patch(state), split_patch(final))
    assert d.files == [] and "disagree about line 1" in d.not_comparable["f.txt"]
    binary = _patch(tmp_path, "b", lambda w: (w / "logo.bin").write_bytes(bytes(range(256))))
    d = interdiff(split_patch(binary), [])
    assert "binary" in d.not_comparable["logo.bin"]

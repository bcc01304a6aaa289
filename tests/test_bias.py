"""Acceptance-bias measures (Table 4): diffs from real git repos, every number worked by hand."""

from __future__ import annotations

import random
import subprocess
from pathlib import Path

import pytest

from swe_residual.report.bias import (
    exposed_files,
    inspected,
    kept_fraction,
    lcs_length,
    parse_patch,
    runs_git,
)
from swe_residual.report.tables import build_report
from swe_residual.results import Manifest, Record, StateFacts, TaskFacts
from swe_residual.trajectory import Action, Trajectory

# -- helpers --------------------------------------------------------------------------------------


def acceptance_bias(
    records: list[Record], manifest: Manifest | None = None, root: Path | None = None
) -> dict:
    """Table 4 of the report: {track: {agent: measures}}."""
    return build_report(records, manifest, root=root, n_boot=1)["acceptance_bias"]


class Repo:
    """A temp git repo at a base commit; diff() returns `git diff --binary` of edits vs base."""

    def __init__(self, path: Path, files: dict[str, str | bytes]):
        self.path = path
        path.mkdir(parents=True)
        self.git("init", "-q")
        self.git("config", "user.email", "t@example.com")
        self.git("config", "user.name", "t")
        self._write(files)
        self.git("add", "-A")
        self.git("commit", "-qm", "base")

    def git(self, *args: str) -> bytes:
        return subprocess.run(["git", "-C", str(self.path), *args], check=True, capture_output=True).stdout

    def _write(self, files: dict[str, str | bytes | None]) -> None:
        for name, content in files.items():
            p = self.path / name
            if content is None:
                p.unlink()
                continue
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(content if isinstance(content, bytes) else content.encode())

    def diff(
        self,
        edits: dict[str, str | bytes | None],
        renames: dict[str, str] | None = None,
        commit: bool = False,
    ) -> bytes:
        for old, new in (renames or {}).items():
            (self.path / new).parent.mkdir(parents=True, exist_ok=True)
            self.git("mv", old, new)
        self._write(edits)
        self.git("add", "-A")
        if commit:  # an agent that committed its work: the final diff is still taken from base
            self.git("commit", "-qm", "work")
            patch = self.git("diff", "--binary", "-M", "HEAD~1", "HEAD")
            self.git("reset", "-q", "--hard", "HEAD~1")
        else:
            patch = self.git("diff", "--cached", "--binary", "-M", "HEAD")
            self.git("reset", "-q", "--hard", "HEAD")
        self.git("clean", "-qfd")
        return patch


def lines(*xs: str) -> str:
    return "".join(x + "\n" for x in xs)


def rec(
    case: str,
    task: str,
    start: str,
    outcome,
    tests=None,
    state=None,
    steps=None,
    artifacts=None,
    declared=True,
    verdict=None,
    termination="submitted",
) -> Record:
    return Record(
        case_id=case,
        agent="A",
        track="repo",
        task=task,
        start=start,
        state=state,
        predecessor={"agent": "p", "model_family": "DS"} if state else None,
        outcome=outcome,
        verdict=verdict or ("pass" if outcome == 1 else "fail" if outcome == 0 else "infra_error"),
        tests=tests or {},
        declared_complete=declared,
        termination=termination,
        steps=steps,
        artifacts=artifacts or {},
    )


def traj(*commands: str | Action) -> Trajectory:
    t = Trajectory(agent="A", harness="test")
    for c in commands:
        t.add_step(actions=[c if isinstance(c, Action) else Action(command=c, output="")])
    return t


# -- patches and Kept -----------------------------------------------------------------------------


def test_parse_patch_reads_real_git_diffs(tmp_path):
    repo = Repo(
        tmp_path / "r",
        {
            "a.py": lines("one", "two", "three"),
            "gone.txt": lines("bye"),
            "old/name.py": lines("x = 1", "y = 2"),
            "img.bin": b"\x00\x01\x02",
        },
    )
    patch = repo.diff(
        {
            # a content line "++ plus" is written "+++ plus" in the diff, "-- minus" deleted as "--- minus":
            # hunk line counts must keep both as content, not headers
            "a.py": lines("one", "++ plus", "three", "-- minus"),
            "new.py": lines("n1", "n2"),
            "gone.txt": None,
            "img.bin": b"\x00\xff\x00\x01",
            "new/name.py": lines("x = 1", "y = 2", "z = 3"),
        },
        renames={"old/name.py": "new/name.py"},
    )
    files = parse_patch(patch)
    assert set(files) == {"a.py", "new.py", "gone.txt", "img.bin", "new/name.py"}
    assert files["a.py"].added == ["++ plus", "-- minus"] and files["a.py"].deleted == 1  # "two" replaced
    assert files["new.py"].added == ["n1", "n2"]
    assert files["gone.txt"].added == [] and files["gone.txt"].deleted == 1
    assert files["img.bin"].binary and files["img.bin"].added == []
    assert files["new/name.py"].old_path == "old/name.py" and files["new/name.py"].added == ["z = 3"]


def _lcs_dp(a, b):
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b):
            cur.append(prev[j] + 1 if x == y else max(prev[j + 1], cur[j]))
        prev = cur
    return prev[-1]


def test_lcs_length_matches_dynamic_programming():
    rng = random.Random(7)
    for _ in range(300):
        a = [rng.choice("abcd") for _ in range(rng.randrange(0, 30))]
        b = [rng.choice("abcde") for _ in range(rng.randrange(0, 30))]
        assert lcs_length(a, b) == _lcs_dp(a, b)
    # hand examples: ABC vs CAB -> "AB" (2); AAB vs AB -> 2; order matters, a set lookup would say 3
    assert lcs_length(list("ABC"), list("CAB")) == 2
    assert lcs_length(list("AAB"), list("AB")) == 2


@pytest.fixture
def kept_repo(tmp_path):
    repo = Repo(tmp_path / "k", {"a.py": lines("base"), "b.py": lines("other")})
    # P: a.py gains A B C D (4 lines); in b.py "other" is replaced by X (1 line; the deleted
    # "other" is not part of P). |P| = 5.
    pred = parse_patch(repo.diff({"a.py": lines("base", "A", "B", "C", "D"), "b.py": lines("X")}))
    assert sum(len(f.added) for f in pred.values()) == 5
    return repo, pred


def test_kept_reordered_lines_count_once_in_order(kept_repo):
    repo, pred = kept_repo
    # final a.py '+' lines D A B C: order-preserving match with A B C D keeps A B C = 3; b.py X = 1
    # Kept = (3 + 1) / 5 = 0.8 (a set lookup would say 5/5)
    final = parse_patch(repo.diff({"a.py": lines("base", "D", "A", "B", "C"), "b.py": lines("X")}))
    assert kept_fraction(pred, final) == pytest.approx(0.8)


def test_kept_lines_moved_to_another_file_are_not_kept(kept_repo):
    repo, pred = kept_repo
    # A B move from a.py to c.py: a.py keeps C D (2), b.py keeps X (1) -> 3/5 = 0.6
    final = parse_patch(
        repo.diff({"a.py": lines("base", "C", "D"), "c.py": lines("A", "B"), "b.py": lines("X")})
    )
    assert kept_fraction(pred, final) == pytest.approx(0.6)


def test_kept_counts_committed_work_from_base_and_discarded_work(kept_repo):
    repo, pred = kept_repo
    # the continuation committed: its final diff from base still holds all five lines -> 1.0
    final = parse_patch(
        repo.diff({"a.py": lines("base", "A", "B", "C", "D", "E"), "b.py": lines("X")}, commit=True)
    )
    assert kept_fraction(pred, final) == 1.0
    # `git reset --hard` to base: the final diff is empty -> 0/5
    assert kept_fraction(pred, parse_patch(b"")) == 0.0


def test_kept_duplicated_lines(tmp_path):
    repo = Repo(tmp_path / "d", {"a.py": lines("base")})
    # P = [x, x, y] (x written twice by the predecessor)
    pred = parse_patch(repo.diff({"a.py": lines("base", "x", "x", "y")}))
    # one x left: LCS([x,x,y],[x,y]) = 2 -> 2/3
    assert kept_fraction(pred, parse_patch(repo.diff({"a.py": lines("base", "x", "y")}))) == pytest.approx(
        2 / 3
    )
    # x y x: LCS = 2 ("x y" or "x x") -> 2/3
    assert kept_fraction(
        pred, parse_patch(repo.diff({"a.py": lines("base", "x", "y", "x")}))
    ) == pytest.approx(2 / 3)
    # an extra x does not push Kept over 1: LCS([x,x,y],[x,x,x,y]) = 3 -> 1.0
    assert kept_fraction(pred, parse_patch(repo.diff({"a.py": lines("base", "x", "x", "x", "y")}))) == 1.0


def test_kept_is_none_without_predecessor_lines(tmp_path):
    repo = Repo(tmp_path / "n", {"a.py": lines("base", "gone")})
    pred = parse_patch(repo.diff({"a.py": lines("base")}))  # only deletions: P is empty
    assert kept_fraction(pred, pred) is None


# -- opened / not opened --------------------------------------------------------------------------

DIFF_A = (
    "diff --git a/src/a.py b/src/a.py\nindex 1..2 100644\n--- a/src/a.py\n+++ b/src/a.py\n"
    "@@ -1 +1 @@\n-x = 1\n+x = 2\n"
)
DIFF_B = DIFF_A.replace("src/a.py", "src/b.py")

OPENED = [
    # (command, output, expected) - a and b are both candidates
    ("cat src/a.py", "x = 1\n", {"src/a.py"}),
    ("cat -n /app/src/a.py", "     1\tx = 1\n", {"src/a.py"}),  # absolute path
    ("cd src && cat a.py", "x = 1\n", {"src/a.py"}),  # relative to a cd
    ("cat src/*.py", "x = 1\ny = 2\n", {"src/a.py", "src/b.py"}),  # glob
    ("sed -n '1,40p' src/a.py", "x = 1\n", {"src/a.py"}),
    ("sed -ne 's/x/y/p' src/b.py", "y = 1\n", {"src/b.py"}),
    ("head -n 20 src/a.py", "x = 1\n", {"src/a.py"}),
    ("tail -5 src/b.py", "y = 2\n", {"src/b.py"}),
    ("less src/a.py", "x = 1\n", {"src/a.py"}),
    ("cat src/a.py | grep -n x", "1:x = 1\n", {"src/a.py"}),  # content through a filter
    ("grep -n 'x =' src/a.py", "1:x = 1\n", {"src/a.py"}),  # one file: bare content lines
    ("grep -rn 'x' src/", "src/a.py:1:x = 1\n", {"src/a.py"}),  # path:line:content
    ("grep -rn -C1 'x' .", "./src/b.py-3-context\n./src/b.py:4:x\n", {"src/b.py"}),
    ("rg 'x ='", "src/a.py:1:x = 1\n", {"src/a.py"}),
    ("rg --heading 'x'", "src/b.py\n4:x = 2\n", {"src/b.py"}),  # rg heading blocks
    ("git diff", DIFF_A, {"src/a.py"}),  # hunks of a only
    ("git --no-pager diff HEAD -- src/b.py | head -50", DIFF_B, {"src/b.py"}),
    # not opened
    ("cat src/a.py", "cat: src/a.py: No such file or directory\n", set()),  # error only
    ("cat src/a.py", "", set()),  # nothing shown
    ("cat src/a.py | wc -l", "12\n", set()),  # count only
    ("cat src/a.py > /tmp/copy.py", "", set()),  # redirected
    ("head src/a.py > /dev/null; echo done", "done\n", set()),
    ("cat > src/a.py <<'EOF'\nx = 1\nEOF", "", set()),  # writing, not reading
    ("sed -i 's/x/y/' src/a.py && echo ok", "ok\n", set()),  # in-place edit
    ("ls -la src", "a.py\nb.py\n", set()),
    ("find . -name '*.py'", "./src/a.py\n./src/b.py\n", set()),
    ("rg --files", "src/a.py\nsrc/b.py\n", set()),
    ("grep -l x -r src", "src/a.py\n", set()),
    ("grep -rl x src", "src/a.py\n", set()),
    ("grep -c x src/a.py src/b.py", "src/a.py:1\nsrc/b.py:0\n", set()),
    ("grep -q x src/a.py && echo yes", "yes\n", set()),
    ("git status", "On branch main\n\tmodified:   src/a.py\n", set()),
    ("git diff --stat", " src/a.py | 2 +-\n 1 file changed\n", set()),
    ("git diff --name-only", "src/a.py\n", set()),
    ("cat a.py", "x = 1\n", set()),  # another a.py, not src/a.py
]


@pytest.mark.parametrize(
    "command,output,expected", OPENED, ids=[f"{i}:{c[0][:30]}" for i, c in enumerate(OPENED)]
)
def test_opened_shell_commands(command, output, expected):
    action = Action(command=command, output=output, kind="shell")
    assert exposed_files(action, ["src/a.py", "src/b.py"]) == expected


def test_opened_editor_views_but_not_edits_or_failed_views():
    cands = ["src/a.py"]
    assert exposed_files(
        Action(command="view", kind="view", path="/app/src/a.py", output="1 x = 1"), cands
    ) == {"src/a.py"}
    assert (
        exposed_files(
            Action(
                command="view", kind="view", path="src/a.py", output="Error: the path src/a.py does not exist"
            ),
            cands,
        )
        == set()
    )
    assert (
        exposed_files(Action(command="str_replace", kind="edit", path="src/a.py", output="edited"), cands)
        == set()
    )


def test_runs_git_status_or_diff():
    assert runs_git(Action(command="git status --short"))
    assert runs_git(Action(command="cd /app && git -C . diff --stat"))
    assert runs_git(Action(command="sudo git --no-pager diff HEAD"))
    assert not runs_git(Action(command="git log --oneline"))
    assert not runs_git(Action(command="echo 'git diff'"))


def test_inspection_by_git_or_reading_a_predecessor_file():
    pred = {"src/a.py"}
    assert inspected(traj("ls", "git status"), pred)
    assert inspected(traj(Action(command="cat src/a.py", output="x = 1\n")), pred)
    assert not inspected(traj(Action(command="cat src/other.py", output="z\n"), "ls src"), pred)


def test_steps_ratio_is_median_over_tasks_of_per_task_means():
    # t1: clean 20 steps; continuations 10 and 30 -> ratios 0.5, 1.5 -> task mean 1.0
    # t2: clean 10; continuation 5 -> 0.5
    # t3: clean 10; continuation 40 -> 4.0
    # median over tasks of [1.0, 0.5, 4.0] = 1.0 (the mean would be 1.83)
    records = [
        rec("c1", "t1", "clean", 1, steps=20),
        rec("r1", "t1", "residual", 0, state="s1", steps=10),
        rec("r2", "t1", "residual", 1, state="s2", steps=30),
        rec("c2", "t2", "clean", 1, steps=10),
        rec("r3", "t2", "residual", 0, state="s3", steps=5),
        rec("c3", "t3", "clean", 0, steps=10),
        rec("r4", "t3", "residual", 0, state="s4", steps=40),
        # not normally submitted (budget): excluded
        rec("r5", "t3", "residual", 0, state="s4", steps=400, declared=False, termination="budget"),
    ]
    out = acceptance_bias(records)["repo"]["A"]["steps_ratio"]
    assert out["value"] == pytest.approx(1.0) and out["n_tasks"] == 3 and out["n_runs"] == 4


# -- the whole table on one hand-computed run ------------------------------------------------------


@pytest.fixture
def scenario(tmp_path):
    """Tasks t1 (states s1, s2) and t2 (state s3); graded tests f1 f2 p1 p2; solution files
    t1: a.py, lib.py; t2: a.py. s1 changes a.py only, so L(s1) = {lib.py}; L(s2) = L(s3) = {}."""
    run = tmp_path / "run"
    run.mkdir()
    repo = Repo(tmp_path / "repo", {"a.py": lines("base"), "lib.py": lines("lib")})

    def save(name: str, patch: bytes) -> str:
        (run / f"{name}.patch").write_bytes(patch)
        return f"{name}.patch"

    p1 = save("s1", repo.diff({"a.py": lines("base", "A", "B", "C", "D")}))
    p2 = save("s2", repo.diff({"a.py": lines("base", "A", "B"), "lib.py": lines("lib", "L1", "L2")}))
    p3 = save("s3", repo.diff({"a.py": lines("base", "X", "Y")}))
    graded = ["f1", "f2", "p1", "p2"]
    fam = {"agent": "p", "model_family": "DS"}
    manifest = Manifest(
        tasks={
            "repo/t1": TaskFacts(track="repo", tests=graded, solution_files=["a.py", "lib.py"]),
            "repo/t2": TaskFacts(track="repo", tests=graded, solution_files=["a.py"]),
        },
        states={
            "s1": StateFacts(
                track="repo",
                task="t1",
                predecessor=fam,
                failing_tests=["f1", "f2"],
                patch=p1,
                changed_files=["a.py"],
            ),
            "s2": StateFacts(
                track="repo",
                task="t1",
                predecessor=fam,
                failing_tests=["f1"],
                patch=p2,
                changed_files=["a.py", "lib.py"],
            ),
            "s3": StateFacts(
                track="repo",
                task="t2",
                predecessor=fam,
                failing_tests=["f1", "f2"],
                patch=p3,
                changed_files=["a.py"],
            ),
        },
    )

    def artifacts(name: str, edits: dict, trajectory: Trajectory | None) -> dict:
        out = {"patch": save(f"run-{name}", repo.diff(edits))}
        if trajectory is not None:
            trajectory.write(run / f"{name}.traj.json")
            out["trajectory"] = f"{name}.traj.json"
        return out

    P = "passed"
    F = "failed"
    records = [
        # Clean Start runs: t1 solved (changes lib.py, the file s1 left out), t2 failed (f2 still failing)
        rec(
            "k1",
            "t1",
            "clean",
            1,
            {t: P for t in graded},
            steps=20,
            artifacts=artifacts("k1", {"a.py": lines("base", "S1"), "lib.py": lines("lib", "S2")}, None),
        ),
        rec(
            "k2",
            "t2",
            "clean",
            0,
            {"f1": P, "f2": F, "p1": P, "p2": P},
            steps=10,
            artifacts=artifacts("k2", {"a.py": lines("base", "S")}, None),
        ),
        # c1 from s1: failed with exactly F(s1); keeps A B D of A B C D; opens lib.py but leaves it
        rec(
            "c1",
            "t1",
            "residual",
            0,
            {"f1": F, "f2": F, "p1": P, "p2": P},
            state="s1",
            steps=10,
            artifacts=artifacts(
                "c1",
                {"a.py": lines("base", "A", "B", "D", "E")},
                traj("git status", Action(command="cat lib.py", output="lib\n")),
            ),
        ),
        # c2 from s2: failed; repairs f1, breaks p1; keeps all 4 predecessor lines; no inspection
        rec(
            "c2",
            "t1",
            "residual",
            0,
            {"f1": P, "f2": F, "p1": F, "p2": P},
            state="s2",
            steps=30,
            artifacts=artifacts(
                "c2",
                {"a.py": lines("base", "A", "B"), "lib.py": lines("lib", "L1", "L2", "L3")},
                traj(Action(command="ls", output="a.py lib.py\n"), "python -m pytest"),
            ),
        ),
        # c3 from s3: success; keeps X of X Y; reads a.py (a predecessor file)
        rec(
            "c3",
            "t2",
            "residual",
            1,
            {t: P for t in graded},
            state="s3",
            steps=5,
            artifacts=artifacts(
                "c3",
                {"a.py": lines("base", "X", "Z")},
                traj(Action(command="cat a.py", output="base\nX\nY\n")),
            ),
        ),
        # not normally submitted (budget) and an infra error: excluded from every measure
        rec(
            "c4",
            "t2",
            "residual",
            0,
            {"f1": F, "f2": F},
            state="s3",
            steps=99,
            declared=False,
            termination="budget",
        ),
        rec("c5", "t1", "residual", None, state="s1", termination="infra"),
    ]
    return records, manifest, run


def test_acceptance_bias_table4_by_hand(scenario):
    records, manifest, run = scenario
    m = acceptance_bias(records, manifest, root=run)["repo"]["A"]
    assert m["n_continuations"] == 3 and m["n_failed_continuations"] == 2
    # Same failing, failed continuations c1 (t1: F'={f1,f2}=F(s1) -> 1), c2 (t1: F'={f2,p1} != {f1} -> 0)
    # t1 mean 0.5; t2 has no failed continuation -> 0.5 over 1 task
    assert m["same_failing"]["value"] == pytest.approx(0.5) and m["same_failing"]["n_tasks"] == 1
    # Initially failing, Residual (all normally submitted): c1 0/2, c2 1/1 -> t1 0.5; c3 2/2 -> t2 1 => 0.75
    assert m["initially_failing_residual"]["value"] == pytest.approx(0.75)
    # Initially failing, Clean: t1 clean passes all: s1 2/2, s2 1/1 -> 1; t2 clean passes f1 of {f1,f2} -> 0.5
    # mean over tasks (1 + 0.5)/2 = 0.75
    assert m["initially_failing_clean"]["value"] == pytest.approx(0.75)
    # Repair (failed only): t1 (0 + 1)/2 = 0.5
    assert m["repair_rate"]["value"] == pytest.approx(0.5)
    # Break (failed only): c1 passing on s1 {p1,p2}, none fail -> 0; c2 passing on s2 {f2,p1,p2}, f2 p1 fail -> 2/3
    # t1 mean 1/3
    assert m["break_rate"]["value"] == pytest.approx(1 / 3)
    # Kept (failed only): c1 LCS(ABCD, ABDE)=3 -> 3/4; c2 A B + L1 L2 all there -> 4/4; t1 mean 0.875
    assert m["kept"]["value"] == pytest.approx(0.875)
    # Left-out files: only s1 has L = {lib.py}; clean k1 changed lib.py (1), c1 did not (0) but opened it (1)
    assert m["left_out_changed_clean"]["value"] == 1.0
    assert m["left_out_changed_residual"]["value"] == 0.0
    assert m["left_out_opened"]["value"] == 1.0
    # Steps: t1 (10/20 + 30/20)/2 = 1.0; t2 5/10 = 0.5; median of [1.0, 0.5] = 0.75
    assert m["steps_ratio"]["value"] == pytest.approx(0.75)
    # Inspection: c1 git status (1), c2 none (0) -> t1 0.5; c3 read a.py, modified by s3 (1) -> t2 1 => 0.75
    assert m["inspection_rate"]["value"] == pytest.approx(0.75)
    # Split by Kept over all normally submitted continuations: c1 0.75, c2 1.0, c3 X of X Y = 0.5 -> median 0.75
    # high (> 0.75): c2 failed -> 0;  low (<= 0.75): c1 (t1: 0), c3 (t2: 1) -> (0 + 1)/2 = 0.5
    split = m["kept_split"]
    assert split["median_kept"] == pytest.approx(0.75)
    assert split["high"]["value"] == 0.0 and split["low"]["value"] == pytest.approx(0.5)
    assert split["value"] == pytest.approx(-50.0)


def test_acceptance_bias_is_na_with_reasons_when_inputs_are_missing(scenario):
    records, manifest, run = scenario
    bare = [r.model_copy(update={"tests": {}, "artifacts": {}}) for r in records]
    m = acceptance_bias(bare, manifest, root=run)["repo"]["A"]
    for key in (
        "same_failing",
        "initially_failing_clean",
        "initially_failing_residual",
        "repair_rate",
        "break_rate",
        "kept",
        "left_out_changed_clean",
        "left_out_changed_residual",
        "left_out_opened",
        "inspection_rate",
        "kept_split",
    ):
        assert m[key]["value"] is None, key
        assert m[key]["reason"], key
    assert "per-test" in m["same_failing"]["reason"]
    assert "patch" in m["kept"]["reason"]
    assert "trajector" in m["inspection_rate"]["reason"]
    assert m["steps_ratio"]["value"] == pytest.approx(0.75)  # steps still known


def test_acceptance_bias_without_manifest_facts(scenario):
    records, _, run = scenario
    m = acceptance_bias(records, Manifest(), root=run)["repo"]["A"]
    assert m["same_failing"]["value"] is None and "F(S_r)" in m["same_failing"]["reason"]
    assert m["kept"]["value"] is None and "state patches" in m["kept"]["reason"]
    assert m["left_out_changed_clean"]["value"] is None


@pytest.mark.parametrize(
    "tool,args,opened",
    [
        ("Read", {"file_path": "/app/lib.py"}, 1.0),  # Claude Code opened it
        ("str_replace_based_edit_tool", {"command": "view", "path": "/app/lib.py"}, 1.0),
        (
            "Edit",
            {"file_path": "/app/lib.py", "old_string": "lib", "new_string": "x"},
            0.0,
        ),  # changed, not opened
        ("Glob", {"pattern": "**/lib.py"}, 0.0),  # found by name only
    ],
)
def test_left_out_opened_from_imported_atif_tool_calls(scenario, tool, args, opened):
    # c1 (the only continuation from s1, L = {lib.py}) now has an ATIF trajectory with one tool call
    from swe_residual.sources.trajectories import import_trajectory

    records, manifest, run = scenario
    data = {
        "schema_version": "ATIF-v1.4",
        "session_id": "s",
        "agent": {"name": "claude-code", "version": "1"},
        "steps": [
            {
                "step_id": 1,
                "source": "agent",
                "message": "",
                "tool_calls": [{"tool_call_id": "t", "function_name": tool, "arguments": args}],
                "observation": {"results": [{"source_call_id": "t", "content": "     1\tlib\n"}]},
            }
        ],
    }
    import_trajectory(data, "A").write(run / "c1.traj.json")
    m = acceptance_bias(records, manifest, root=run)["repo"]["A"]
    assert m["left_out_opened"]["value"] == opened

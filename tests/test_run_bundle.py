"""Run bundles: `swe-residual run pack RUN --out FILE.tar.gz` from real demo runs, read from another
directory by `report`, `compare` and `gate` with the same numbers as the run dirs; the bundle holds
no path of the machine that made it; `compare` warns when an agent's config changed under its name;
a hostile bundle is refused with one line and nothing written outside."""

from __future__ import annotations

import io
import json
import shutil
import tarfile
from pathlib import Path

import pytest

from swe_residual.errors import InputError
from swe_residual.report.bundle import Limits, extract

from .drivers import ROOT, cli, run_suite

TASK = "invoice-rounding"


def _agents(path: Path, version: str) -> Path:
    """The tracer agent; `version` changes its command (its config), never its name."""
    path.write_text(
        json.dumps({"agents": {"tracer": {"harness": "command", "command": f"echo {version} > notes.txt"}}})
    )
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """Two real demo runs at path A (local backend, one task): oracle and the tracer, whose config
    differs between them; each packed into A."""
    a = tmp_path_factory.mktemp("machine-a")
    shutil.copytree(ROOT / "suites" / "demo" / "tasks" / TASK, a / "tasks" / TASK)
    out: dict[str, Path] = {"a": a}
    for name, version in (("base", "v1"), ("run", "v2")):
        gate = ["--gate-baseline", str(a / "base")] if name == "run" else []  # the run's own gates warn too
        proc = run_suite(
            "--tasks-dir",
            str(a / "tasks"),
            *gate,
            agents=["oracle", "tracer"],
            agent_config=_agents(a / f"{name}-agents.yaml", version),
            run_dir=a / name,
            workers=2,
        )
        assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
        if gate:
            assert (
                "warning: baseline -> run: agent tracer: its config changed under the same name"
                in proc.stdout
            )
        out[name] = a / name
        bundle = a / f"{name}.tar.gz"
        cli("run", "pack", str(a / name), "--out", str(bundle), check=0)
        out[f"{name}.tar.gz"] = bundle
    return out


def _moved(runs: dict[str, Path], b: Path) -> tuple[Path, Path]:
    """The two bundles copied to B, another directory."""
    b.mkdir(parents=True, exist_ok=True)
    return (
        Path(shutil.copy(runs["base.tar.gz"], b / "baseline.tar.gz")),
        Path(shutil.copy(runs["run.tar.gz"], b / "candidate.tar.gz")),
    )


def _numbers(text: str, *given: str) -> str:
    """Output with the names the runs were given replaced (they differ by where they are)."""
    for i, g in enumerate(given):
        text = text.replace(g, f"<run{i}>")
    return text


@pytest.mark.slow
def test_a_bundle_read_elsewhere_gives_the_same_numbers(runs, tmp_path):
    base_tgz, run_tgz = _moved(runs, tmp_path / "b")
    base, run = runs["base"], runs["run"]
    for fmt in ("json", "text"):
        direct = cli("report", str(run), "--format", fmt, check=0).stdout
        packed = cli("report", run_tgz.name, "--format", fmt, cwd=run_tgz.parent, check=0).stdout
        assert packed == direct
    report = json.loads(cli("report", run_tgz.name, "--format", "json", cwd=run_tgz.parent, check=0).stdout)
    table3 = report["tracks"]["demo"]
    assert (table3["oracle"]["clean"], table3["oracle"]["residual"], table3["tracer"]["clean"]) == (
        1.0,
        1.0,
        0.0,
    )
    assert report["meta"]["n_records"] == 6

    direct = cli("compare", str(base), str(run), "--html-dir", str(tmp_path / "p1"), check=0)
    packed = cli("compare", base_tgz.name, run_tgz.name, cwd=run_tgz.parent, check=0)
    assert _numbers(packed.stdout, base_tgz.name, run_tgz.name) == _numbers(
        direct.stdout, str(base), str(run)
    )
    assert "note: no compare.html: RUN is a bundle" in packed.stderr
    # the tracer's config changed under its name: said, with both digests
    base_prov = json.loads((base / "provenance.json").read_text())
    run_prov = json.loads((run / "provenance.json").read_text())
    old, new = base_prov["agents"]["tracer"]["digest"], run_prov["agents"]["tracer"]["digest"]
    assert old != new and base_prov["agents"]["oracle"] == run_prov["agents"]["oracle"]
    warning = (
        f"warning: agent tracer: its config changed under the same name (digest {old[:12]} -> {new[:12]})"
    )
    assert "the runs differ in what made them (provenance.json, baseline -> run):" in packed.stdout
    assert warning in packed.stdout and "agent oracle" not in packed.stdout

    args = ["--max-drop", "5", "--min-clean", "50"]
    direct = cli("gate", str(run), "--baseline", str(base), *args, "--html-dir", str(tmp_path / "p2"))
    packed = cli("gate", run_tgz.name, "--baseline", base_tgz.name, *args, cwd=run_tgz.parent)
    assert packed.returncode == direct.returncode == 10  # the tracer's Clean success is 0
    assert packed.stdout == direct.stdout
    assert (
        f"warning: baseline -> run: agent tracer: its config changed under the same name (digest {old[:12]}"
        in packed.stdout
    )
    # nothing was written beside the bundles: they are read, not changed
    assert sorted(p.name for p in run_tgz.parent.iterdir()) == ["baseline.tar.gz", "candidate.tar.gz"]


@pytest.mark.slow
def test_the_bundle_holds_no_path_of_the_machine_that_made_it(runs, tmp_path):
    run = runs["run"]
    # the run dir as written does hold them (the page's environment, the tables' paths)
    written = b"".join(p.read_bytes() for p in run.rglob("*") if p.is_file())
    assert str(run.resolve()).encode() in written and str(ROOT).encode() in written
    with tarfile.open(runs["run.tar.gz"]) as tar:
        members = tar.getmembers()
        assert all(m.isfile() or m.isdir() for m in members)
        assert all(not m.name.startswith("/") and ".." not in m.name.split("/") for m in members)
        data = b"".join(tar.extractfile(m).read() for m in members if m.isfile())
        names = {m.name.split("/", 1)[1] for m in members if "/" in m.name}
    for path in {str(run.resolve()), str(run.absolute()), str(ROOT), str(Path.home()), str(runs["a"])}:
        assert path.encode() not in data, path
    assert {"results.jsonl", "manifest.json", "provenance.json", "run-info.json"} <= names
    assert not names & {"report.html", "summary.json", "results.csv"}  # `report` makes them again
    rows = [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]
    assert all(not v.startswith("/") for r in rows for v in r["artifacts"].values())
    assert all(f"cases/{Path(r['artifacts']['patch']).parent.parent.name}" for r in rows)
    for r in rows:  # every artifact a record names is in the bundle
        assert set(r["artifacts"].values()) <= names


def _tarball(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for info, data in members:
            info.size = len(data) if data is not None else 0
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def _file(name: str, data: bytes = b"{}\n") -> tuple[tarfile.TarInfo, bytes]:
    return tarfile.TarInfo(name), data


def _link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info, None


@pytest.mark.parametrize(
    "members, why",
    [
        ([_file("run/results.jsonl"), _file("run/../../escaped.txt")], "climbs out with '..'"),
        ([_file("run/results.jsonl"), _file("/tmp/absolute-escape.txt")], "an absolute name"),
        ([_file("run/results.jsonl"), _link("run/cases", "/etc")], "a link, device or fifo"),
        ([_file("run/results.jsonl"), _link("run/hard", "/etc/passwd", tarfile.LNKTYPE)], "a link"),
        ([_file("run/results.jsonl"), _file("run/big", b"x" * 4096)], "over the 1024 a member may have"),
        ([_file("run/results.jsonl")] + [_file(f"run/f{i}") for i in range(20)], "more than 8 members"),
        ([_file("run/" + "d/" * 20 + "f")], "deeper than 12 levels"),
        ([_file("run/results.jsonl"), _file("run/results.jsonl")], "is there twice"),
        ([_file("other/x")], "no run dir in it"),
    ],
)
def test_a_hostile_bundle_is_refused_with_one_line(tmp_path, members, why):
    bundle = _tarball(tmp_path / "hostile.tar.gz", members)
    dest = tmp_path / "out"
    dest.mkdir()
    with pytest.raises(InputError) as exc:
        extract(bundle, dest, Limits(max_member_bytes=1024, max_members=8))
    assert why in str(exc.value) and "\n" not in str(exc.value)
    assert not (tmp_path / "escaped.txt").exists() and not Path("/tmp/absolute-escape.txt").exists()
    assert not any(p.is_symlink() for p in dest.rglob("*"))


@pytest.mark.slow
def test_report_on_a_hostile_bundle_is_a_usage_error(tmp_path):
    bundle = _tarball(tmp_path / "x.tar.gz", [_file("run/results.jsonl"), _link("run/evil", "/etc/passwd")])
    proc = cli("report", str(bundle), check=2)
    assert proc.stderr.startswith(f"error: {bundle}: member 'run/evil': a link, device or fifo")
    (tmp_path / "junk.tar.gz").write_bytes(b"not gzip at all")
    assert "not a readable .tar.gz run bundle" in cli("gate", str(tmp_path / "junk.tar.gz"), check=2).stderr


@pytest.mark.slow
def test_a_bundle_is_regraded_where_it_lies(runs, tmp_path):
    """regrade takes a bundle as it takes a run dir: the same verdicts with the same tasks."""
    _, run_tgz = _moved(runs, tmp_path / "b")
    new = tmp_path / "regraded"
    out = cli(
        "regrade",
        run_tgz.name,
        "--tasks-dir",
        str(runs["a"] / "tasks"),
        "--out",
        str(new),
        cwd=run_tgz.parent,
        check=0,
    ).stdout
    assert "regrade: 6 of 6 case(s) re-graded, 0 moved, 0 not re-gradable; no agent ran" in out
    assert json.loads((new / "provenance.json").read_text())["regrade"]["source"]["name"] == "run"


@pytest.mark.slow
@pytest.mark.parametrize(
    "content, note",
    [
        (None, "provenance unknown: {d}/provenance.json: missing"),
        ("[" * 100_000 + "]" * 100_000, "provenance unknown: {d}/provenance.json: not JSON"),
        (
            '{"agents": [1], "tasks": {"demo/t": 5}, "harness": "x", "backend": ["a"]}',
            'backend: ["a"] -> local',
        ),
        ("link", "provenance unknown: {d}/provenance.json: not read"),
    ],
)
def test_hostile_provenance_is_a_note_never_a_crash(tmp_path, content, note):
    """A baseline's provenance.json that is missing, nested too deep, of the wrong shape or a link
    out of the run dir: compare says so in a warning line and compares the records."""
    base, run = tmp_path / "base", tmp_path / "run"
    for d in (base, run):
        d.mkdir()
        (d / "results.jsonl").write_text("")
    (run / "provenance.json").write_text(json.dumps({"backend": "local", "agents": {}, "tasks": {}}))
    if content == "link":
        (base / "provenance.json").symlink_to("/etc/passwd")
    elif content is not None:
        (base / "provenance.json").write_text(content)
    proc = cli("compare", str(base), str(run), "--html-dir", str(tmp_path / "p"), check=0)
    said = " ".join(proc.stdout.split())  # wrapped at 120 columns; a long path elided in its middle
    head, _, tail = note.partition("{d}/")
    assert f"warning: {head}" in said and tail in said, said
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_a_suite_run_gates_against_a_bundle_as_against_its_run_dir(runs, tmp_path):
    """`pytest --gate-baseline base.tar.gz`: the baseline read from its bundle, elsewhere; the same
    warning and exit as with the run dir. A path that is neither stops the run before any case."""
    base_tgz, _ = _moved(runs, tmp_path / "b")
    a = runs["a"]
    proc = run_suite(
        "--tasks-dir",
        str(a / "tasks"),
        "--gate-baseline",
        str(base_tgz),
        agents=["oracle", "tracer"],
        agent_config=_agents(tmp_path / "agents.yaml", "v2"),
        run_dir=tmp_path / "again",
        workers=2,
    )
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "warning: baseline -> run: agent tracer: its config changed under the same name" in proc.stdout
    assert (tmp_path / "again" / "compare.html").is_file()
    assert not list(Path(tmp_path).glob("**/swe-residual-bundle-*"))  # the extracted copy is gone
    proc = run_suite(
        "--tasks-dir",
        str(a / "tasks"),
        "--gate-baseline",
        str(tmp_path / "no-such-run"),
        agents=["oracle"],
        run_dir=tmp_path / "never",
    )
    assert proc.returncode == 4 and not (tmp_path / "never").exists(), proc.stdout[-2000:] + proc.stderr
    assert (
        f"--gate-baseline {tmp_path / 'no-such-run'}: no results.jsonl there (not a run dir) and not a "
        "run bundle" in proc.stderr
    )

"""The package layout is a contract: the layers in pyproject.toml hold, and no module of the engine
imports itself back through others (docs/README.md, "Layout")."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parent.parent


def test_import_linter_contracts_hold():
    exe = shutil.which("lint-imports") or str(Path(sys.executable).with_name("lint-imports"))
    proc = subprocess.run([exe, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.find_modules_directly_imported_by(w)))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        found.append(sorted(comp))
    return found


def test_no_import_cycle_between_modules():
    graph = grimp.build_graph("swe_residual", "plugins", cache_dir=None, exclude_type_checking_imports=False)
    assert _cycles(graph) == []


def test_cycle_finder_finds_a_cycle():
    # a -> b -> a is a cycle, c (imported by a) is not in it
    graph = grimp.ImportGraph()
    for m in ("pkg", "pkg.a", "pkg.b", "pkg.c"):
        graph.add_module(m)
    graph.add_import(importer="pkg.a", imported="pkg.b")
    graph.add_import(importer="pkg.b", imported="pkg.a")
    graph.add_import(importer="pkg.a", imported="pkg.c")
    assert _cycles(graph) == [["pkg.a", "pkg.b"]]


def test_top_level_holds_only_contracts_and_the_cli():
    top = sorted(p.stem for p in (ROOT / "swe_residual").glob("*.py"))
    # __init__, 14 contracts (structs.py: the readers derived from them), the CLI and one shared
    # service (progress lines); states packs are a package
    assert len(top) <= 17, top


def test_layout_doc_lists_every_module():
    """docs/layout.md names every module of the engine, the plugin and the fixtures, and no module
    that is gone (an __init__.py only where it holds code)."""
    doc = (ROOT / "docs" / "layout.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"^\| `((?:swe_residual|plugins|fixtures)/[\w/]+\.py)` \|", doc, re.M))
    on_disk = set()
    for base in ("swe_residual", "plugins", "fixtures"):
        for path in (ROOT / base).rglob("*.py"):
            if path.name == "__init__.py":
                tree = ast.parse(path.read_text(encoding="utf-8"))
                if all(isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant) for n in tree.body):
                    continue  # a docstring only: the package's row is its dir
            on_disk.add(path.relative_to(ROOT).as_posix())
    assert sorted(on_disk - listed) == [], "modules missing from docs/layout.md"
    assert sorted(listed - on_disk) == [], "docs/layout.md lists modules that do not exist"

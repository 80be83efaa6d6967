"""No import cycle anywhere in dagrl/: an import inside a function only delays a cycle, it does not remove one, so
every import statement counts except those under `if TYPE_CHECKING:` (never run)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "dagrl"


def modules(package: Path = PACKAGE) -> dict[str, Path]:
    found = {}
    for path in package.rglob("*.py"):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _type_checking_only(tree: ast.AST) -> set[int]:
    return {
        id(node)
        for branch in ast.walk(tree)
        if isinstance(branch, ast.If) and "TYPE_CHECKING" in ast.unparse(branch.test)
        for stmt in branch.body
        for node in ast.walk(stmt)
    }


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The dagrl modules that `name` imports (a `from pkg import mod` counts mod, else pkg)."""
    tree = ast.parse(path.read_text())
    skipped, found = _type_checking_only(tree), set()
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = (
                ".".join(package[: len(package) - node.level + 1] + [node.module or ""]).strip(".")
                if node.level
                else node.module or ""
            )
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, stack, on_stack, result, counter = {}, {}, [], set(), [], [0]
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    result.append(sorted(component))
    return result


def test_the_cycle_finder_finds_a_cycle_through_a_function_level_import(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "a.py").write_text("def f():\n    from pkg.sub import b\n")
    (package / "sub" / "b.py").write_text("from ..c import x\n")
    (package / "c.py").write_text("import typing\nif typing.TYPE_CHECKING:\n    from pkg import d\nfrom . import a\n")
    (package / "d.py").write_text("from pkg import c\n")
    known = modules(package)
    graph = {name: imports(name, path, known) for name, path in known.items()}
    assert graph["pkg.a"] == {"pkg.sub.b"} and graph["pkg.sub.b"] == {"pkg.c"} and graph["pkg.c"] == {"pkg.a"}
    assert cycles(graph) == [["pkg.a", "pkg.c", "pkg.sub.b"]]  # d -> c -> d only under TYPE_CHECKING: no cycle
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_in_dagrl():
    known = modules()
    assert "dagrl.config.validate" in known and "dagrl.main_dag" in known
    graph = {name: imports(name, path, known) for name, path in known.items()}
    assert "dagrl.config.errors" in graph["dagrl.config.checks"]  # edges are seen (function-level ones too)
    found = cycles(graph)
    assert not found, "import cycles (imports inside functions count): " + "; ".join(" -> ".join(c) for c in found)


def test_node_modules_import_shared_helpers_from_one_place_not_from_each_other():
    """A module whose functions the graphs in conf/dag/ name imports, of dagrl.nodes, only the context, the shared
    helpers (dagrl/nodes/common.py) and the partial-rollout buffer's module: never another node module."""
    known = modules()
    named = {
        "dagrl.nodes." + fn.split(":")[0].rsplit(".", 1)[1]
        for graph in (PACKAGE.parent / "conf" / "dag").glob("*.yaml")
        for fn in re.findall(r'fn: "?(dagrl\.nodes\.[\w.]+:\w+)', graph.read_text())
    }
    assert {"dagrl.nodes.rollout", "dagrl.nodes.actor", "dagrl.nodes.dynamic_sampling"} <= named
    helpers = {"dagrl.nodes.context", "dagrl.nodes.common", "dagrl.nodes.partial_rollout"}
    assert not named & helpers
    crossing = {
        name: sorted(target for target in imports(name, known[name], known) if target.startswith("dagrl.nodes."))
        for name in sorted(named)
    }
    assert {name: [t for t in targets if t not in helpers] for name, targets in crossing.items()} == {
        name: [] for name in crossing
    }


def test_every_module_is_under_400_lines():
    """dagrl/ and the benchmark scripts beside it."""
    files = [*PACKAGE.rglob("*.py"), *(PACKAGE.parent / "benchmarks").glob("*.py")]
    long = {
        str(path.relative_to(PACKAGE.parent)): n for path in files if (n := len(path.read_text().splitlines())) >= 400
    }
    assert long == {}

"""The layer rule, enforced: imports flow one way, and no module imports itself back.

    infra <- controlplane <- simulator, pipelines <- dashboard;  bench and tests on top

infra imports none of the others; controlplane only infra; the simulator and the jobs
(pipelines) stand on infra and controlplane and never import each other; nothing imports the
dashboard but the dashboard itself and the tests; bench may import every layer but the dashboard
and the tests; the tests, everything. Every import counts, function-local ones included (an
import inside a function is still a dependency, only a later one). No exceptions: a new import
that breaks the rule moves the code to the layer it belongs to, not a line into an allow-list.
"""
from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

LAYERS = ("infra", "controlplane", "simulator", "pipelines", "dashboard", "bench", "tests")
# what each layer may import, besides itself (and the standard library and third-party packages)
MAY_IMPORT = {
    "infra": set(),
    "controlplane": {"infra"},
    "simulator": {"infra", "controlplane"},
    "pipelines": {"infra", "controlplane"},
    "dashboard": {"infra", "controlplane", "simulator", "pipelines"},
    "bench": {"infra", "controlplane", "simulator", "pipelines"},
    "tests": {"infra", "controlplane", "simulator", "pipelines", "dashboard", "bench"},
}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache
def sources() -> dict[str, Path]:
    """Every module of the layers: dotted name -> file."""
    return {module_name(p): p for layer in LAYERS for p in sorted((ROOT / layer).rglob("*.py"))
            if ".venv" not in p.parts}


def imports(path: Path, text: str | None = None) -> list[tuple[int, str, list[str]]]:
    """(line, module, names) of every import statement in the file, at any depth (functions,
    methods, `if`, `try`); relative imports resolved to absolute module names."""
    tree = ast.parse(text if text is not None else path.read_text(), str(path))
    name = module_name(path) if path.is_relative_to(ROOT) else path.stem
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                base = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                module = ".".join(base + ([module] if module else []))
            out.append((node.lineno, module, [a.name for a in node.names]))
    return sorted(out)


@functools.cache
def parsed(path: Path) -> list[tuple[int, str, list[str]]]:
    return imports(path)


def broken(name: str, found: list[tuple[int, str, list[str]]]) -> list[tuple[int, str]]:
    """(line, module) of each of module `name`'s imports (`found`) its layer may not make."""
    layer = name.split(".")[0]
    return [(line, module) for line, module, _ in found
            if module.split(".")[0] in LAYERS and module.split(".")[0] not in MAY_IMPORT[layer] | {layer}]


def violations(files: dict[str, Path]) -> list[str]:
    out = []
    for name, path in files.items():
        layer = name.split(".")[0]
        out += [f"{path.relative_to(ROOT)}:{line} imports {module}, but {layer} may import only "
                f"{', '.join(sorted(MAY_IMPORT[layer])) or 'itself'}" for line, module in broken(name, parsed(path))]
    return out


def graph(files: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the modules of ours it imports (`from p import m` counts as m when m is a module)."""
    edges = {}
    for name, path in files.items():
        deps = set()
        for _, module, names in parsed(path):
            targets = [f"{module}.{n}" if f"{module}.{n}" in files else module for n in names] or [module]
            deps |= {t for t in targets if t in files and t != name}
        edges[name] = deps
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles (strongly connected components of more than one module), each sorted."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):  # Tarjan's algorithm, iterative enough for a few hundred modules
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_every_import_follows_the_layer_rule():
    files = sources()
    assert len(files) > 200 and {n.split(".")[0] for n in files} == set(LAYERS)  # the walk sees every layer
    found = violations(files)
    assert not found, "imports against the layer rule (move the code to its layer):\n" + "\n".join(found)


def test_no_module_imports_itself_back():
    found = cycles(graph(sources()))
    assert not found, "import cycles (function-local imports included): " + "; ".join(" <-> ".join(c) for c in found)


def test_the_walk_sees_function_local_and_relative_imports():
    """The rule checks what it says: a dashboard import hidden in a function of a job is caught."""
    path = ROOT / "pipelines" / "fraud" / "example.py"   # never written: parsed from the text below
    text = ("import json\n"
            "from . import analyzers\n"
            "def draw():\n"
            "    if True:\n"
            "        from dashboard.data import checkpoints\n"
            "    from ..engine import stages\n")
    assert imports(path, text) == [(1, "json", []), (2, "pipelines.fraud", ["analyzers"]),
                                   (5, "dashboard.data", ["checkpoints"]), (6, "pipelines.engine", ["stages"])]
    assert broken("pipelines.fraud.example", imports(path, text)) == [(5, "dashboard.data")]
    assert broken("tests.unit.example", imports(path, text)) == []          # the tests may import anything
    assert broken("infra.example", [(1, "controlplane.store", [])]) == [(1, "controlplane.store")]


def test_a_cycle_through_a_function_local_import_is_found():
    edges = {"infra.broker": {"infra.kafka_client"}, "infra.kafka_client": {"infra.broker"}, "infra.config": set()}
    assert cycles(edges) == [["infra.broker", "infra.kafka_client"]]
    assert cycles({"a": {"b"}, "b": set()}) == []

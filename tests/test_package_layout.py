"""How the package's modules may import each other.

No two modules of hf_neuron import each other, directly or around a circle.

Every ``import`` counts, at module level or inside a function: a function-level import that closes a
circle only moves the failure from import time to the first call, and makes the order modules must be
read in impossible to tell. Importing a submodule through its package (``from pkg import module``)
depends on that module, not on the package's ``__init__``; importing a name the ``__init__`` defines
(or re-exports) depends on the ``__init__``.

``hf_neuron.testing`` holds helpers for the tests, the benchmarks and the compatibility harness
(``hf_neuron.compat``): the product never imports it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import hf_neuron

PACKAGE = Path(hf_neuron.__file__).parent


def _module_files() -> dict[str, Path]:
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules[name] = path
    return modules


def import_graph() -> dict[str, set[str]]:
    """``{module: the hf_neuron modules it imports}``, read from the sources (nothing is imported)."""
    modules = _module_files()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(anchor + ([node.module] if node.module else []))
                submodules = [f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in modules]
                names_of_base = len(submodules) < len(node.names)
                targets = submodules + ([base] if names_of_base else [])
            else:
                continue
            graph[name].update(t for t in targets if t in modules and t != name)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One circle of imports (its modules in order, the first repeated at the end), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        path.append(module)
        for target in sorted(graph[module]):
            if state.get(target) == 1:
                return path[path.index(target):] + [target]
            if target not in state:
                found = visit(target)
                if found:
                    return found
        path.pop()
        state[module] = 2
        return None

    for module in sorted(graph):
        if module not in state:
            found = visit(module)
            if found:
                return found
    return None


def test_no_module_imports_itself_around_a_circle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import circle: " + " -> ".join(cycle)


def test_the_check_sees_a_circle_through_function_level_imports():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_the_graph_reads_submodules_names_and_function_level_imports():
    graph = import_graph()
    # module-level, a submodule through its package, and a function-level import
    assert "hf_neuron.transformers.generation.steps" in graph["hf_neuron.transformers.generation.chunked_prefill"]
    assert "hf_neuron.simulator.device" in graph["hf_neuron.simulator.activation"]
    assert "hf_neuron.simulator" not in graph["hf_neuron.simulator.activation"]


def test_only_the_harness_imports_the_test_helpers():
    users = sorted(module for module, targets in import_graph().items()
                   if any(t == "hf_neuron.testing" or t.startswith("hf_neuron.testing.") for t in targets)
                   and not module.startswith(("hf_neuron.testing", "hf_neuron.compat")))
    assert users == []

"""The architecture, enforced: the core never reaches vLLM, and no module imports itself back.

Every ``import`` statement in ``poot_vllm/`` is read from the source (those
inside functions too: a function-level import is still a dependency, only a
later one), so a forbidden import fails here before it can fail a user.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "poot_vllm"
#: What the vLLM-free core may never import (vLLM's own packages and poot's adapter).
FORBIDDEN_IN_CORE = ("vllm", "torch", "poot_vllm.adapter")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports_of(name: str) -> set[str]:
    """Every module ``name`` imports, by absolute name (submodules resolved where they exist)."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            for alias in node.names:
                # ``from pkg import submodule`` depends on the submodule (its
                # package is initialised first, like any parent package);
                # ``from pkg import name`` depends on the package itself.
                sub = f"{target}.{alias.name}"
                out.add(sub if sub in MODULES else target)
    return out


GRAPH = {name: imports_of(name) for name in MODULES}


def test_every_module_is_in_core_or_adapter():
    top = sorted(n for n in MODULES if n.count(".") == 1 and n.split(".")[1] not in ("core", "adapter"))
    assert top == [], f"modules outside poot_vllm.core / poot_vllm.adapter: {top}"


def test_core_imports_no_vllm_torch_or_adapter():
    offenders = {
        name: sorted(i for i in imported if any(i == f or i.startswith(f + ".") for f in FORBIDDEN_IN_CORE))
        for name, imported in GRAPH.items()
        if name.startswith("poot_vllm.core")
    }
    offenders = {k: v for k, v in offenders.items() if v}
    assert offenders == {}, f"the core must stay vLLM-free: {offenders}"


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles_even_through_function_level_imports():
    assert _cycles(GRAPH) == []


def test_the_checker_sees_cycles_and_forbidden_imports():
    """The two checks above can fail: a planted cycle and a planted vLLM import are found."""
    planted = {**GRAPH, "poot_vllm.core.errors": GRAPH["poot_vllm.core.errors"] | {"poot_vllm.core.limits"},
               "poot_vllm.core.limits": GRAPH["poot_vllm.core.limits"] | {"poot_vllm.core.errors"}}
    assert ["poot_vllm.core.errors", "poot_vllm.core.limits"] in _cycles(planted)
    assert "poot_vllm.core.json_schema.compiler" in MODULES
    assert "poot_vllm.core.errors" in imports_of("poot_vllm.core.json_schema.compiler")
    assert "vllm.v1.request" in imports_of("poot_vllm.adapter.backend") or any(
        i.startswith("vllm") for i in imports_of("poot_vllm.adapter.backend"))

"""The shape of ``talentrl_core`` stays as a maintainer needs it (docs/architecture.md): no import cycle, no layering
break, functions ≤ 80 lines (docstring excluded), classes ≤ 300, modules ≤ 450, every one of them (the four
modules once over the limit were split; none is exempt)."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "talentrl_core"
MAX_FUNCTION, MAX_CLASS, MAX_MODULE = 80, 300, 450
FORBIDDEN = {  # importer prefix → what it must never import
    "": ("dagster", "hydra", "dvc", "pipeline", "assets"),  # the library never imports orchestration
    "envs": ("talentrl_core.library", "talentrl_core.rl", "talentrl_core.evaluation", "talentrl_core.sft"),
    "library": ("talentrl_core.rl", "talentrl_core.evaluation", "talentrl_core.sft"),
}


def _modules() -> dict[str, Path]:
    out = {}
    for f in sorted(PKG.rglob("*.py")):
        parts = ["talentrl_core", *f.relative_to(PKG).with_suffix("").parts]
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return out


def _imports(mod: str, f: Path, tree: ast.AST) -> set[str]:
    """Every module ``mod`` names in an import statement (module level and inside functions alike)."""
    names = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.ImportFrom):
            if n.level:
                base = mod.split(".")[: len(mod.split(".")) - n.level + (1 if f.name == "__init__.py" else 0)]
                name = ".".join(base + ([n.module] if n.module else []))
            else:
                name = n.module or ""
            names.add(name)
            names.update(f"{name}.{a.name}" for a in n.names)
        elif isinstance(n, ast.Import):
            names.update(a.name for a in n.names)
    return names


def _graph() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    mods = _modules()
    edges, raw = {}, {}
    for mod, f in mods.items():
        raw[mod] = _imports(mod, f, ast.parse(f.read_text()))
        deps = set()
        for name in raw[mod]:
            while name and name not in mods:
                name = name.rpartition(".")[0]
            if name and name != mod and not mod.startswith(name + "."):
                deps.add(name)
        edges[mod] = deps
    return edges, raw


def test_no_import_cycle():
    edges, _ = _graph()
    state, stack, cycles = {}, [], []

    def visit(u):
        state[u] = 1
        stack.append(u)
        for v in sorted(edges[u]):
            if state.get(v) == 1:
                cycles.append(" -> ".join(stack[stack.index(v):] + [v]))
            elif not state.get(v):
                visit(v)
        stack.pop()
        state[u] = 2

    for m in sorted(edges):
        if not state.get(m):
            visit(m)
    assert not cycles, cycles


def test_layering():
    _, raw = _graph()
    broken = []
    for mod, names in raw.items():
        sub = mod.split(".")[1] if "." in mod else ""
        for prefix, banned in FORBIDDEN.items():
            if prefix in ("", sub):
                broken += [f"{mod} imports {n}" for n in sorted(names)
                           if any(n == b or n.startswith(b + ".") for b in banned)]
    assert not broken, broken


def _sizes():
    for f in sorted(PKG.rglob("*.py")):
        rel = str(f.relative_to(PKG))
        text = f.read_text()
        tree = ast.parse(text)
        yield rel, "module", text.count("\n")
        for n in ast.walk(tree):
            size = n.end_lineno - n.lineno + 1 if hasattr(n, "end_lineno") else 0
            if isinstance(n, ast.ClassDef):
                yield f"{rel}::{n.name}", "class", size
            elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = n.body[0]
                if isinstance(doc, ast.Expr) and isinstance(getattr(doc, "value", None), ast.Constant) \
                        and isinstance(doc.value.value, str):
                    size -= doc.end_lineno - doc.lineno + 1
                yield f"{rel}::{n.name}", "function", size


def test_functions_classes_and_modules_fit():
    limits = {"function": MAX_FUNCTION, "class": MAX_CLASS, "module": MAX_MODULE}
    over = [f"{kind} {name}: {size} lines > {limits[kind]}" for name, kind, size in _sizes() if size > limits[kind]]
    assert not over, over

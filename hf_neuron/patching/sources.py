"""Reading an upstream module's source without importing it.

Fixes are decided when their library is imported, often before the module they change is: importing
it then would cost every user of the library (Diffusers has 75 transformer modules, TRL loads its
trainers lazily), and may happen in the middle of the library's own import. The source tells what
the installed release does; the fix checks the live object again when it installs.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import importlib.util
from pathlib import Path
from typing import Any


def module_path(module_name: str) -> Path | None:
    """The source file of ``module_name``, found without importing it or its parent packages.

    ``importlib.util.find_spec`` on a submodule imports its parents; only the top-level package is
    looked up here and the rest of the name is followed on disk.
    """
    top, *rest = module_name.split(".")
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if not rest:
        return Path(spec.origin) if spec.origin else None
    base = next(iter(spec.submodule_search_locations or []), None)
    if base is None:
        return None
    candidate = Path(base).joinpath(*rest)
    for path in (candidate.with_suffix(".py"), candidate / "__init__.py"):
        if path.is_file():
            return path
    return None


@functools.lru_cache(maxsize=None)
def module_ast(module_name: str) -> ast.Module | None:
    """The parsed source of ``module_name`` (None when it does not exist or is not Python source)."""
    path = module_path(module_name)
    if path is None or path.suffix != ".py":
        return None
    return ast.parse(path.read_text(encoding="utf-8"))


def module_mentions(module_name: str, text: str) -> bool | None:
    """Whether the source of ``module_name`` contains ``text`` (None: module not found)."""
    tree = module_ast(module_name)
    return None if tree is None else text in ast.unparse(tree)


def _top_level(module_name: str, kind: type, name: str):
    tree = module_ast(module_name)
    if tree is None:
        return None
    return next((node for node in tree.body if isinstance(node, kind) and node.name == name), None)


def function_mentions(module_name: str, function_name: str, text: str) -> bool | None:
    """Whether the source of a module-level function contains ``text`` (None: function not found)."""
    node = _top_level(module_name, ast.FunctionDef, function_name)
    return None if node is None else text in ast.unparse(node)


def _assignment(class_node: ast.ClassDef, attribute: str) -> ast.expr | None | type(dataclasses.MISSING):
    for stmt in class_node.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.target.id == attribute:
            return stmt.value
        if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == attribute for t in stmt.targets):
            return stmt.value
    return dataclasses.MISSING


def class_field_default(module_name: str, class_name: str, field_name: str) -> Any:
    """The literal default of a dataclass field as written in the class body.

    ``dataclasses.MISSING`` when the class or the field is absent, ``...`` when the default is not a
    literal (``field(default=...)`` is looked through).
    """
    node = _top_level(module_name, ast.ClassDef, class_name)
    value = dataclasses.MISSING if node is None else _assignment(node, field_name)
    if value is dataclasses.MISSING or value is None:
        return dataclasses.MISSING
    if isinstance(value, ast.Call):
        value = next((kw.value for kw in value.keywords if kw.arg == "default"), None)
        if value is None:
            return ...
    try:
        return ast.literal_eval(value)
    except ValueError:
        return ...


def class_assigns(module_name: str, class_name: str, attribute: str) -> bool | None:
    """Whether the class body assigns ``attribute`` a non-empty value (None: class not found).

    Empty means ``None``, ``[]``, ``()`` or ``{}``: the upstream "not provided" values.
    """
    node = _top_level(module_name, ast.ClassDef, class_name)
    if node is None:
        return None
    value = _assignment(node, attribute)
    if value is dataclasses.MISSING or value is None:
        return False
    if isinstance(value, ast.Constant) and value.value is None:
        return False
    if isinstance(value, (ast.List, ast.Tuple)) and not value.elts:
        return False
    if isinstance(value, ast.Dict) and not value.keys:
        return False
    return True

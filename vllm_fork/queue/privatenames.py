"""Private upstream names a patch's added code uses: what a release bump can break silently.

A name is private by Python's convention: it starts with `_` (dunders such as
`__init__` do not count). It is *upstream's* private name when the code reaches it
through something imported from a first-party package of the tree (`vllm`), from
another module than the one that defines it:

    from vllm.utils import torch_utils
    torch_utils._current_stream_tls              # vllm.utils.torch_utils._current_stream_tls
    getattr(torch_utils, "_current_stream_tls")  # the same, by string
    from vllm.utils import _private              # vllm.utils._private
    import vllm._custom_ops as ops               # a private module

while `module._parameters` on a torch module, `torch.Tensor._make_subclass` or
`self._ring` are not: `module` and `torch` are not bound by an import from vLLM,
and `self` is the code's own object. The walk is static and per file: bindings
are every import in the file (any scope), so a local variable that shadows an
imported name, or a vLLM object reached through a call (`get_offloader()._x`),
is not seen. Only uses on the lines the patch adds are listed; the file is read
as the patched tree has it, so an import the patch did not add still resolves.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

#: Built-ins that name an attribute by string: getattr(obj, "_name"), ...
_BY_STRING = frozenset({"getattr", "setattr", "hasattr", "delattr"})


@dataclass(frozen=True)
class PrivateUse:
    """One use of an upstream private name on a line a patch adds."""

    name: str  # as the code writes it: `torch_utils._current_stream_tls`, or the import's dotted name
    qualified: str  # resolved: `vllm.utils.torch_utils._current_stream_tls`
    path: str  # the file in the tree
    line: int

    @property
    def attr(self) -> str:
        """The private name itself (`_current_stream_tls`): what a test that covers it mentions."""
        return next(part for part in self.qualified.split(".") if is_private(part))


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def module_of(path: str) -> str:
    """The dotted module a file is: vllm/a/b.py -> vllm.a.b; vllm/a/__init__.py -> vllm.a."""
    parts = path.removesuffix(".py").split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _absolute(node: ast.ImportFrom, path: str) -> str:
    """The module an ImportFrom names, relative forms resolved against the file's package."""
    if not node.level:
        return node.module or ""
    package = path.split("/")[:-1]
    if node.level - 1 > len(package):
        return ""
    base = package[: len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def bindings(module: ast.Module, path: str, first_party: frozenset[str]) -> dict[str, str]:
    """Local name -> the first-party dotted path it is bound to, over every import in the file."""
    bound: dict[str, str] = {}
    for node in ast.walk(module):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] not in first_party:
                    continue
                if alias.asname:
                    bound[alias.asname] = alias.name
                else:
                    top = alias.name.split(".")[0]  # `import vllm.a.b` binds `vllm`
                    bound[top] = top
        elif isinstance(node, ast.ImportFrom):
            source = _absolute(node, path)
            if source.split(".")[0] not in first_party:
                continue
            for alias in node.names:
                if alias.name != "*":
                    bound[alias.asname or alias.name] = f"{source}.{alias.name}"
    return bound


def _resolve(node: ast.expr, bound: dict[str, str]) -> str | None:
    """The first-party dotted path an expression names through public attributes, or None."""
    if isinstance(node, ast.Name):
        return bound.get(node.id)
    if isinstance(node, ast.Attribute) and not is_private(node.attr):
        base = _resolve(node.value, bound)
        return f"{base}.{node.attr}" if base else None
    return None


def _import_uses(node: ast.Import | ast.ImportFrom, path: str, first_party: frozenset[str]) -> list[str]:
    """Dotted private names an import statement reaches into."""
    if isinstance(node, ast.Import):
        dotted = [a.name for a in node.names]
    else:
        source = _absolute(node, path)
        dotted = [f"{source}.{a.name}" for a in node.names if a.name != "*"]
    own = module_of(path)
    found = []
    for name in dotted:
        parts = name.split(".")
        if parts[0] not in first_party or not any(is_private(p) for p in parts):
            continue
        container = ".".join(parts[: next(i for i, p in enumerate(parts) if is_private(p))])
        if container != own:
            found.append(name)
    return found


def _attribute_use(node: ast.AST, bound: dict[str, str]) -> tuple[str, str] | None:
    """(as written, qualified) when `node` reads or writes a private attribute of a first-party object."""
    if isinstance(node, ast.Attribute) and is_private(node.attr):
        base = _resolve(node.value, bound)
        return (ast.unparse(node), f"{base}.{node.attr}") if base else None
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _BY_STRING
        and len(node.args) >= 2
        and isinstance(node.args[1], ast.Constant)
        and isinstance(node.args[1].value, str)
        and is_private(node.args[1].value)
    ):
        base = _resolve(node.args[0], bound)
        attr = node.args[1].value
        return (f"{ast.unparse(node.args[0])}.{attr}", f"{base}.{attr}") if base else None
    return None


def private_uses(source: str, path: str, added: set[int], first_party: frozenset[str]) -> list[PrivateUse]:
    """Upstream private names used on the `added` lines of `path` (its text after the patch).

    Code that does not parse uses none that can be told (`invoke check` reports the syntax error).
    """
    return [use for use in all_private_uses(source, path, first_party) if use.line in added]


def all_private_uses(source: str, path: str, first_party: frozenset[str]) -> list[PrivateUse]:
    """Upstream private names used on any line of `path`, sorted by line (`private_uses` picks
    those on the lines a patch adds; this whole-file form is what the check's cache keeps)."""
    try:
        module = ast.parse(source, path)
    except (SyntaxError, ValueError):
        return []
    bound = bindings(module, path, first_party)
    own = module_of(path)
    found: list[PrivateUse] = []
    for node in ast.walk(module):
        line = getattr(node, "lineno", None)
        if line is None:
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            found += [PrivateUse(name, name, path, node.lineno) for name in _import_uses(node, path, first_party)]
            continue
        use = _attribute_use(node, bound)
        if use is not None and use[1].rsplit(".", 1)[0] != own:
            found.append(PrivateUse(use[0], use[1], path, line))
    return sorted(set(found), key=lambda u: (u.path, u.line, u.name))

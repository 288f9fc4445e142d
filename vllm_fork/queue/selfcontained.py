"""Every patch self-contained: each prefix of the queue (upstream + patches 1..i) must stand.

`invoke check` has the queue applied in its check tree, one commit per patch, so
commit i is exactly the prefix that ends with patch i. For every Python file a
patch adds or modifies, the file as that commit has it is checked statically:

- names it uses that nothing binds (a module-level definition, an import, a
  builtin): what pyflakes and ruff call F821;
- `import pkg.mod` and `from pkg.mod import Name` (relative forms too) of a
  first-party module or name that the tree does not have at that commit;
- Python that does not parse.

Only what the patch introduces counts: the same check on the parent commit's
version of the file gives the findings upstream (or an earlier patch) already
had. A finding also names the later patch that provides the missing name or
module, when one does: the usual cause is a patch that uses a helper a later
patch adds.

The checker is Python's own `symtable` and `ast`, not pyflakes: nothing to
install for `invoke check`, and comparing with the parent's version cancels
what a small checker misjudges in both. Files are read from the commits with
one `git cat-file --batch` (no checkout per prefix).
"""

from __future__ import annotations

import ast
import builtins
import functools
import importlib.util
import re
import subprocess
import symtable
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from vllm_fork.core.git import git, git_env
from vllm_fork.queue.checkcache import Memo

#: Module attributes Python sets in every module (and `__path__` in packages).
MODULE_DUNDERS = frozenset(
    {
        "__name__",
        "__file__",
        "__doc__",
        "__spec__",
        "__loader__",
        "__package__",
        "__builtins__",
        "__path__",
        "__annotations__",
        "__dict__",
        "__cached__",
    }
)
BUILTINS = frozenset(dir(builtins)) | MODULE_DUNDERS


@dataclass(frozen=True)
class Finding:
    """One thing a patch leaves broken at its prefix of the queue."""

    patch: str  # the patch file's name
    path: str  # the file in the tree
    line: int
    what: str  # e.g. "undefined name 'x'"
    provided_by: str = ""  # the later patch that adds the missing name or module, when one does

    @property
    def message(self) -> str:
        later = f" (defined only by a later patch: {self.provided_by})" if self.provided_by else ""
        return f"{self.patch}: {self.path}:{self.line}: {self.what}{later}"


# -- reading the tree at a commit --


class Blobs:
    """File contents at commits, read through one `git cat-file --batch` per round of requests."""

    def __init__(self, tree: Path):
        self.tree = tree
        self._cache: dict[str, bytes | None] = {}

    def get_many(self, specs: list[str]) -> None:
        todo = [s for s in dict.fromkeys(specs) if s not in self._cache]
        if not todo:
            return
        proc = subprocess.run(
            ["git", "-C", str(self.tree), "cat-file", "--batch"],
            input="".join(f"{s}\n" for s in todo).encode(),
            capture_output=True,
            env=git_env(),
            check=True,
        )
        data, pos = proc.stdout, 0
        for spec in todo:
            end = data.index(b"\n", pos)
            header = data[pos:end].decode(errors="replace")
            pos = end + 1
            if header.endswith(" missing"):
                self._cache[spec] = None
                continue
            size = int(header.split()[2])
            self._cache[spec] = data[pos : pos + size]
            pos += size + 1  # the content, then a newline

    def text(self, commit: str, path: str) -> str | None:
        """The file as Python reads it (its coding cookie honoured); None when absent or not decodable."""
        spec = f"{commit}:{path}"
        self.get_many([spec])
        data = self._cache[spec]
        if data is None:
            return None
        try:
            return importlib.util.decode_source(data)
        except (UnicodeDecodeError, SyntaxError, LookupError):
            return None


def _paths_at(tree: Path, commit: str) -> set[str]:
    # -r: every file, not the top level only; --name-only: paths, no modes or blob ids.
    return set(git(tree, "ls-tree", "-r", "--name-only", commit).stdout.splitlines())


def _dirs_of(paths: set[str]) -> set[str]:
    dirs = set()
    for p in paths:
        parts = p.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            dirs.add("/".join(parts[:i]))
    return dirs


@dataclass
class _Snapshot:
    """The file list of one commit, for module look-ups."""

    commit: str
    files: set[str]
    dirs: set[str]
    #: path -> the commit that last wrote it, for the files the queue wrote up to here. Any
    #: other file is as `base` has it: read there, so each version is read (and parsed) once
    #: however many prefixes import it.
    written_at: dict[str, str] = field(default_factory=dict)
    base: str = ""

    def source_commit(self, path: str) -> str:
        return self.written_at.get(path, self.base or self.commit)

    def module_file(self, module: str) -> str | None:
        """The file that is `module` (a.b -> a/b.py or a/b/__init__.py); '' for a namespace package."""
        base = module.replace(".", "/")
        if f"{base}.py" in self.files:
            return f"{base}.py"
        if f"{base}/__init__.py" in self.files:
            return f"{base}/__init__.py"
        return "" if base in self.dirs else None


def _changes(tree: Path, commit: str) -> tuple[list[str], list[str]]:
    """(paths `commit` adds or modifies, paths it deletes), renames counting as both."""
    # -r: into folders; --no-commit-id: no header line; --name-status: a status letter per path;
    # -M: a moved file is a rename (R<score> old new), not a delete and an add.
    rows = git(tree, "diff-tree", "-r", "--no-commit-id", "--name-status", "-M", f"{commit}^", commit).stdout
    written, deleted = [], []
    for row in rows.splitlines():
        status, *paths = row.split("\t")
        if status.startswith("R"):
            deleted.append(paths[0])
            written.append(paths[1])
        elif status == "D":
            deleted.append(paths[0])
        else:
            written.append(paths[0])
    return written, deleted


# -- what one file needs --


@functools.lru_cache(maxsize=64)  # each version of a touched file is read for names and for imports
def _parse(source: str, path: str) -> ast.Module:
    return ast.parse(source, path)


def _first_use_lines(module: ast.Module) -> dict[str, int]:
    lines: dict[str, int] = {}
    for node in ast.walk(module):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Store):
            lines[node.id] = min(lines.get(node.id, node.lineno), node.lineno)
    return lines


#: `from m import *` (only legal at a module's top level, possibly indented under if/try).
_STAR_IMPORT = re.compile(r"^[ \t]*from[ \t]+[\w.]+[ \t]+import[ \t]+\*", re.MULTILINE)


def _has_star_import(source: str) -> bool:
    return _STAR_IMPORT.search(source) is not None


@functools.lru_cache(maxsize=1024)  # many touched files import the same few modules
def module_bindings(source: str, path: str) -> frozenset[str] | None:
    """The names a module binds at its top level; None when that cannot be known (a `*` import,
    a module `__getattr__`, or no parse)."""
    if _has_star_import(source):
        return None
    try:
        top = symtable.symtable(source, path, "exec")
    except (SyntaxError, ValueError):
        return None
    names = {s.get_name() for s in top.get_symbols() if s.is_assigned() or s.is_imported()}
    names |= _declared_global_assignments(top)
    return None if "__getattr__" in names else frozenset(names)


def _nested_names(table: symtable.SymbolTable, wanted: Callable[[symtable.Symbol], bool]) -> set[str]:
    """The names of the symbols `wanted` picks in every scope nested in `table`."""
    found = set()
    for child in table.get_children():
        found |= {s.get_name() for s in child.get_symbols() if wanted(s)}
        found |= _nested_names(child, wanted)
    return found


def _declared_global_assignments(table: symtable.SymbolTable) -> set[str]:
    """Names functions bind at module level through a `global` statement."""
    return _nested_names(table, lambda s: s.is_declared_global() and s.is_assigned())


def _global_uses(table: symtable.SymbolTable) -> set[str]:
    """Names the nested scopes of `table` read as globals."""
    return _nested_names(table, lambda s: s.is_global() and s.is_referenced())


def _syntax_error(exc: SyntaxError | ValueError) -> str:
    line = getattr(exc, "lineno", 0) or 0
    return f"line {line}: {getattr(exc, 'msg', exc)}"


def undefined_names(source: str, path: str) -> dict[str, int] | str:
    """name -> line of its first use, for names the file uses but nothing binds; or the syntax error."""
    try:
        top = symtable.symtable(source, path, "exec")
    except (SyntaxError, ValueError) as exc:
        # The parser's own error when the file does not parse; else what symtable adds.
        try:
            _parse(source, path)
        except (SyntaxError, ValueError) as parse_exc:
            return _syntax_error(parse_exc)
        return _syntax_error(exc)
    if _has_star_import(source):
        return {}  # anything may come from it
    bound = {s.get_name() for s in top.get_symbols() if s.is_assigned() or s.is_imported()}
    bound |= _declared_global_assignments(top)
    used = {s.get_name() for s in top.get_symbols() if s.is_referenced()} | _global_uses(top)
    missing = used - bound - BUILTINS
    if not missing:
        return {}  # the usual case: no walk of the tree for lines
    lines = _first_use_lines(_parse(source, path))
    return {name: lines.get(name, 0) for name in sorted(missing)}


@dataclass(frozen=True)
class _Import:
    module: str  # the absolute dotted module
    name: str  # the imported name ('' for `import module`)
    line: int


def _package_of(path: str) -> list[str]:
    """The package a file's relative imports start from: a/b for both a/b/c.py and a/b/__init__.py."""
    return path.split("/")[:-1]


def _import_nodes(module: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """The module's import statements, but not those in a `try:` body (they usually guard an
    optional module and handle its absence)."""
    found: list[ast.Import | ast.ImportFrom] = []
    stack: list[ast.AST] = [module]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
            continue
        if isinstance(node, ast.Try | ast.TryStar):
            stack += [*node.handlers, *node.orelse, *node.finalbody]
            continue
        if isinstance(node, ast.expr):
            continue  # no statements below an expression
        stack += ast.iter_child_nodes(node)
    return sorted(found, key=lambda n: n.lineno)


def all_imports(source: str, path: str) -> list[_Import]:
    """The file's imports (outside `try:` bodies), made absolute."""
    try:
        module = _parse(source, path)
    except (SyntaxError, ValueError):
        return []
    package = _package_of(path)
    found = []
    for node in _import_nodes(module):
        if isinstance(node, ast.Import):
            found += [_Import(a.name, "", node.lineno) for a in node.names]
            continue
        if node.level:
            # A relative import climbs from the file's package (level 1 is the package itself).
            if node.level - 1 > len(package):
                continue
            base = package[: len(package) - (node.level - 1)]
            absolute = ".".join(base + ([node.module] if node.module else []))
        else:
            absolute = node.module or ""
        if absolute:
            found += [_Import(absolute, a.name, node.lineno) for a in node.names if a.name != "*"]
    return found


def imports_of(source: str, path: str, first_party: set[str], memo: Memo | None = None) -> list[_Import]:
    """The file's imports of first-party modules, made absolute."""
    rows = (memo or Memo()).get(
        "imports", source, path, lambda: [[i.module, i.name, i.line] for i in all_imports(source, path)]
    )
    return [_Import(module, name, line) for module, name, line in rows if module.split(".")[0] in first_party]


@dataclass(frozen=True)
class _Missing:
    what: str  # the message
    module: str  # the module that is missing, or that lacks `name`
    name: str  # the missing name; '' when the module itself is missing


def _bindings(source: str, path: str, memo: Memo) -> frozenset[str] | None:
    names = memo.get("bindings", source, path, lambda: _sorted_or_none(module_bindings(source, path)))
    return None if names is None else frozenset(names)


def _sorted_or_none(names: frozenset[str] | None) -> list[str] | None:
    return None if names is None else sorted(names)


def _undefined(source: str, path: str, memo: Memo) -> dict[str, int] | str:
    found: dict[str, int] | str = memo.get("undefined", source, path, lambda: undefined_names(source, path))
    return found


def _import_problem(imp: _Import, snap: _Snapshot, blobs: Blobs, memo: Memo) -> _Missing | None:
    """What is missing for `imp` at the snapshot's commit, or None when it resolves."""
    parts = imp.module.split(".")
    for i in range(1, len(parts) + 1):
        if snap.module_file(".".join(parts[:i])) is None:
            return _Missing(f"import of module '{imp.module}', which does not exist at this point", imp.module, "")
    if not imp.name:
        return None
    if snap.module_file(f"{imp.module}.{imp.name}") is not None:
        return None  # a submodule
    file = snap.module_file(imp.module)
    if not file:
        return None  # a namespace package: only submodules, checked above
    text = blobs.text(snap.source_commit(file), file)
    names = _bindings(text, file, memo) if text is not None else None
    if names is None or imp.name in names:
        return None
    return _Missing(
        f"'{imp.name}' imported from '{imp.module}', which does not define it at this point", imp.module, imp.name
    )


# -- which later patch provides it --


def _definition_pattern(name: str) -> re.Pattern[str]:
    n = re.escape(name)
    return re.compile(rf"^\+\s*(?:async\s+def|def|class)\s+{n}\b|^\+{n}\s*(?::[^=]*)?=", re.MULTILINE)


def _provider(tree: Path, later: list[tuple[str, str]], name: str = "", module: str = "") -> str:
    """The first later patch that creates `module` (no `name`), or defines `name` (in `module`'s
    file when given) or creates it as a submodule of `module`."""
    pattern = _definition_pattern(name) if name else None
    base = module.replace(".", "/")
    wanted = {f"{base}/{name}.py", f"{base}/{name}/__init__.py"} if name else {f"{base}.py", f"{base}/__init__.py"}
    for commit, patch in later:
        # --diff-filter=A: the files the commit creates.
        created = git(
            tree, "diff-tree", "-r", "--no-commit-id", "--name-only", "--diff-filter=A", f"{commit}^", commit
        ).stdout.splitlines()
        if module and wanted & set(created):
            return patch
        if pattern is None:
            continue
        paths = [f"{base}.py", f"{base}/__init__.py"] if module else []
        # --unified=0: only the added lines matter.
        diff = git(tree, "diff", "--unified=0", f"{commit}^", commit, "--", *paths).stdout
        if pattern.search(diff):
            return patch
    return ""


# -- the check --


def prefix_findings(tree: Path, base: str, patches: list[str], memo: Memo | None = None) -> list[Finding]:
    """Findings for the commits above `base` in `tree`'s HEAD, one per patch name in `patches` (in order).

    `memo` keeps each file's analysis by its text, across runs when it persists.
    """
    commits = git(tree, "rev-list", "--reverse", f"{base}..HEAD").stdout.split()
    if len(commits) != len(patches):
        return []  # not one commit per patch: apply_problems has reported why
    memo = memo or Memo()
    blobs = Blobs(tree)
    snapshots = {base: _Snapshot(base, (files := _paths_at(tree, base)), _dirs_of(files), base=base)}
    findings: list[Finding] = []
    parent = base
    for i, (commit, patch) in enumerate(zip(commits, patches)):
        written, deleted = _changes(tree, commit)
        before = snapshots[parent]
        # The file list follows from the parent's and the commit's changes: no listing per commit.
        files = (before.files - set(deleted)) | set(written)
        dirs = before.dirs | _dirs_of(set(written)) if not deleted else _dirs_of(files)
        written_at = {p: c for p, c in before.written_at.items() if p not in deleted} | dict.fromkeys(written, commit)
        snap = snapshots[commit] = _Snapshot(commit, files, dirs, written_at, base)
        later = list(zip(commits[i + 1 :], patches[i + 1 :]))
        touched = sorted(p for p in written if p.endswith(".py"))
        blobs.get_many([f"{c}:{p}" for p in touched for c in (commit, parent)])
        first_party = {p.split("/")[0] for p in files if p.count("/") == 1 and p.endswith("/__init__.py")}
        context = _Context(tree, blobs, patch, snap, before, first_party, later, memo)
        for path in touched:
            findings += _file_findings(context, path)
        parent = commit
    return findings


@dataclass(frozen=True)
class _Context:
    """One patch's place in the queue: what `_file_findings` checks a file it touches against."""

    tree: Path
    blobs: Blobs
    patch: str
    snap: _Snapshot  # the tree after the patch
    before: _Snapshot  # the tree before it
    first_party: set[str]
    later: list[tuple[str, str]]  # (commit, patch name) of the patches after it
    memo: Memo


def _file_findings(ctx: _Context, path: str) -> list[Finding]:
    text = ctx.blobs.text(ctx.snap.commit, path)
    if text is None:
        return []
    old = ctx.blobs.text(ctx.before.commit, path)
    found: list[Finding] = []
    now = _undefined(text, path, ctx.memo)
    if now:
        # The parent's version only matters when there is something to excuse.
        was = _undefined(old, path, ctx.memo) if old is not None else {}
        if isinstance(now, str):
            if not isinstance(was, str):
                found.append(Finding(ctx.patch, path, int(now.split()[1].rstrip(":")), f"does not parse ({now})"))
            return found
        already = set(was) if isinstance(was, dict) else set()
        for name, line in now.items():
            if name not in already:
                found.append(
                    Finding(ctx.patch, path, line, f"undefined name '{name}'", _provider(ctx.tree, ctx.later, name))
                )
    imports = imports_of(text, path, ctx.first_party, ctx.memo)
    # The modules they import, read in one batch (one git process, not one per import).
    wanted = [(sn, sn.module_file(imp.module)) for imp in imports for sn in (ctx.snap, ctx.before)]
    ctx.blobs.get_many([f"{sn.source_commit(file)}:{file}" for sn, file in wanted if file])
    for imp in imports:
        problem = _import_problem(imp, ctx.snap, ctx.blobs, ctx.memo)
        if problem is None:
            continue
        old_imports = (
            {(i.module, i.name) for i in imports_of(old, path, ctx.first_party, ctx.memo)} if old is not None else set()
        )
        if (imp.module, imp.name) in old_imports and _import_problem(imp, ctx.before, ctx.blobs, ctx.memo) is not None:
            continue  # broken before this patch too: not this patch's doing
        provider = _provider(ctx.tree, ctx.later, problem.name, problem.module)
        found.append(Finding(ctx.patch, path, imp.line, problem.what, provider))
    return found

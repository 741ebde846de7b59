"""The module import graph of a package, read from its source (relative imports resolved)."""

import ast
from pathlib import Path


def module_name(path: Path, package_dir: Path) -> str:
    """``pkg.sub.mod`` for ``package_dir/sub/mod.py`` (``pkg`` is ``package_dir``'s name)."""
    parts = path.relative_to(package_dir).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join((package_dir.name, *parts))


def imported_modules(path: Path, package_dir: Path) -> set[str]:
    """The absolute names of what ``path`` imports: each module, and each ``module.name`` it takes
    a name from (a submodule or not)."""
    module = module_name(path, package_dir)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")
            if node.level:
                base = base[: len(base) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            names.add(target)
            names |= {f"{target}.{alias.name}" for alias in node.names}
    return names


def graph(package_dir: Path) -> dict[str, set[str]]:
    """module -> the package's own modules it imports."""
    paths = sorted(package_dir.rglob("*.py"))
    own = {module_name(p, package_dir) for p in paths}
    return {module_name(p, package_dir): imported_modules(p, package_dir) & own for p in paths}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Import cycles between modules (a package's ``__init__`` counts as the package's module)."""
    found, state = [], {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = "open"
        for target in sorted(edges.get(node, ())):
            if target == node:
                continue
            if state.get(target) == "open":
                found.append(path[path.index(target) :] + [target])
            elif target not in state:
                visit(target, [*path, target])
        state[node] = "done"

    for node in sorted(edges):
        if node not in state:
            visit(node, [node])
    return found

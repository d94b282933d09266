"""The package's layers: no module imports from a layer above its own (docs/developer/index.md, "Layout").

Every `import` and `from ... import` in the package is read with `ast`, at any depth (imports inside functions
count too: a lazy import is still a dependency). A new package must be given a layer here before it can land.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "rlfoundry"

# Top to bottom. A module may import from its own layer and the layers below it. "" is the package root
# (`rlfoundry/__init__.py`, the `rlfoundry.train` facade), which sits with the CLI at the top.
LAYERS: list[tuple[str, ...]] = [
    ("", "cli"),
    ("studies", "bench", "hub", "inspect"),
    ("trained",),
    ("run",),
    ("records",),
    ("sinks",),
    ("experiment",),
    ("algos",),
    ("world_models",),
    ("buffers", "nets"),
    ("envs",),
    ("config",),
]
RANK = {name: rank for rank, names in enumerate(LAYERS) for name in names}


def _part(module: str) -> str:
    """The layer name of a dotted module inside the package: `rlfoundry.algos.ppo` -> `algos`."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _imported(node: ast.AST, module: str, is_package: bool, known: set[str]) -> list[str]:
    """The package modules an import statement reaches, as dotted names."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names if alias.name.split(".")[0] == "rlfoundry"]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level:  # relative: resolve against this module's package
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        target = ".".join(base + ([node.module] if node.module else []))
    else:
        target = node.module or ""
    if target.split(".")[0] != "rlfoundry":
        return []
    # `from rlfoundry import envs` imports the subpackage, not the root
    found = [f"{target}.{alias.name}" for alias in node.names if f"{target}.{alias.name}" in known]
    return found or [target]


def upward_imports(package: Path) -> list[str]:
    """`file:line: imports X (layer L) from layer M above it` for every import that points upward."""
    files = sorted(package.rglob("*.py"))

    def dotted(path: Path) -> str:
        parts = path.relative_to(package.parent).with_suffix("").parts
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

    known = {dotted(path) for path in files}
    problems = []
    for path in files:
        module = dotted(path)
        own = _part(module)
        if own not in RANK:
            problems.append(f"{path.relative_to(package.parent)}: package '{own}' has no layer in LAYERS")
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            for target in _imported(node, module, path.name == "__init__.py", known):
                theirs = _part(target)
                if theirs not in RANK:
                    problems.append(f"{path.relative_to(package.parent)}:{node.lineno}: imports {target}, "
                                    f"whose package '{theirs}' has no layer in LAYERS")
                elif RANK[theirs] < RANK[own]:
                    problems.append(f"{path.relative_to(package.parent)}:{node.lineno}: imports {target} "
                                    f"(layer '{theirs or 'rlfoundry'}') from layer '{own}' below it")
    return problems


def test_no_module_imports_from_a_layer_above_its_own():
    problems = upward_imports(PACKAGE)
    assert not problems, "imports against the layer order:\n" + "\n".join(problems)


def test_the_check_finds_a_planted_upward_import(tmp_path):
    package = tmp_path / "rlfoundry"
    for name, text in {
        "__init__.py": "",
        "config/__init__.py": "",
        "config/base.py": "from rlfoundry.envs import make  # upward\n",
        "envs/__init__.py": "from rlfoundry.config.base import X\n\ndef make():\n    from rlfoundry.run import trainer\n",
        "nets/__init__.py": "from rlfoundry import envs\nfrom . import flat\n",
        "nets/flat.py": "from ..algos import optim\n",
        "algos/__init__.py": "import rlfoundry\n",
        "mystery/__init__.py": "",
    }.items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(text)
    problems = upward_imports(package)
    assert any(p.startswith("rlfoundry/config/base.py:1: imports rlfoundry.envs ") for p in problems), problems
    assert any(p.startswith("rlfoundry/envs/__init__.py:4: imports rlfoundry.run ") for p in problems), problems
    assert any(p.startswith("rlfoundry/nets/flat.py:1: imports rlfoundry.algos ") for p in problems), problems
    assert any(p.startswith("rlfoundry/algos/__init__.py:1: imports rlfoundry (layer 'rlfoundry')") for p in problems)
    assert any("package 'mystery' has no layer" in p for p in problems), problems
    assert len(problems) == 5, problems  # the downward and same-layer imports are fine


def test_every_package_has_a_layer():
    packages = {path.name for path in PACKAGE.iterdir() if (path / "__init__.py").is_file()}
    assert packages <= set(RANK), f"give these packages a layer in LAYERS (and in the docs): {packages - set(RANK)}"


def module_paths(text: str) -> set[str]:
    """The `dir/file.py` paths and the (`dir/` folders a text names."""
    return set(re.findall(r"`([\w.-]+/[\w/.-]+\.py)`", text)) | set(re.findall(r"\(`([\w/.-]+/)`", text))


# Pages about other repositories' code (the world models' reference implementations), whose paths are theirs: there
# only the paths that start in one of this repository's folders are checked.
SOURCE_PAGES = ("docs/WORLD-MODEL-SOURCES.md", "docs/world-models/")


def test_module_paths_in_the_readme_and_the_docs_exist():
    """Every `dir/file.py` path the README or a documentation page (docs/**/*.md) names is in the tree: from the
    repository root, or a package module relative to src/rlfoundry (`algos/ppo.py`)."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    found = {page.relative_to(ROOT).as_posix(): module_paths(page.read_text()) for page in pages}
    ours = {path.name for folder in (ROOT, PACKAGE) for path in folder.iterdir() if path.is_dir()}
    for page in found:
        if page.startswith(SOURCE_PAGES):
            found[page] = {p for p in found[page] if p.split("/")[0] in ours}
    for page in ("docs/developer/index.md", "docs/guide/algorithms.md", "docs/guide/runs.md"):
        # pages that name modules throughout (the layout, the algorithm files, the run's): none found means the
        # pattern no longer matches how the pages write paths
        assert found.get(page), f"{page} names no module paths: the pattern is out of date (or the page moved)"
    missing = [f"{page}: {p}" for page, paths in found.items() for p in sorted(paths)
               if not (ROOT / p).exists() and not (PACKAGE / p).exists()]
    assert not missing, f"the docs name paths that are not in the tree: {missing}"

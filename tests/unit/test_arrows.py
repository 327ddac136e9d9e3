"""The arrows of STYLE.md that import-linter (``make lint``) cannot say.

import-linter holds the package's own layers (pyproject.toml's contracts); these
hold the domain to the standard library, and the Lambda entry points and the CDK
app to the thin shapes they are meant to have.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "layers" / "python" / "dynacron"
# What of the package infra/ may read: definitions and names, never runtime code.
INFRA_MAY_IMPORT = ("dynacron.definitions",)


def imported_modules(path: Path) -> Iterator[str]:
    """Every module ``path`` imports, at any depth of the file (absolute names)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}: relative import"
            module = node.module or ""
            # ``from dynacron import metric_names`` imports a module of the package.
            yield from (
                f"{module}.{alias.name}" if module == "dynacron" else module for alias in node.names
            )


def test_the_domain_imports_the_standard_library_and_itself_only() -> None:
    offending = {
        f"{path.relative_to(PACKAGE)}: {module}"
        for path in (PACKAGE / "domain").rglob("*.py")
        for module in imported_modules(path)
        if module.split(".")[0] not in sys.stdlib_module_names
        and not module.startswith("dynacron.domain")
    }
    assert not offending, sorted(offending)


def test_each_lambda_entry_point_imports_the_package_and_no_other_function() -> None:
    handlers = sorted((ROOT / "functions").glob("*/handler.py"))
    assert len(handlers) >= 6
    for path in handlers:
        modules = set(imported_modules(path))
        assert modules <= {"dynacron.entry.functions"}, (path.parent.name, modules)


def test_the_cdk_app_reads_definitions_not_runtime_code() -> None:
    offending = {
        f"{path.relative_to(ROOT)}: {module}"
        for path in (ROOT / "infra").rglob("*.py")
        for module in imported_modules(path)
        if module.startswith("dynacron")
        and not any(module.startswith(allowed) for allowed in INFRA_MAY_IMPORT)
    }
    assert not offending, sorted(offending)


def test_the_benchmarks_import_nothing_of_the_tests() -> None:
    # The tests use bench's sink and process helpers; the arrow never points back.
    offending = {
        f"{path.relative_to(ROOT)}: {module}"
        for path in (ROOT / "bench").rglob("*.py")
        for module in imported_modules(path)
        if module.split(".")[0] == "tests"
    }
    assert not offending, sorted(offending)


def test_the_checker_sees_a_forbidden_import(tmp_path: Path) -> None:
    # A domain module that reaches for boto3 is caught, from any depth of the file.
    sneaky = tmp_path / "sneaky.py"
    sneaky.write_text("def f():\n    import boto3\n    from dynacron.adapters.aws import items\n")
    assert set(imported_modules(sneaky)) == {"boto3", "dynacron.adapters.aws"}

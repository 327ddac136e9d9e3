"""Lambda's Python and the tests' agree: one version in the layer build, the template,
the lint and the Makefile's second test run.

The layer is built for Lambda's Python (``infra/layer.py``) while the suite runs on
the oldest Python the package supports; the code is pinned to what both accept
(ruff's target is the older, mypy checks once more against Lambda's stdlib) and
``make test`` runs the unit tier, and the deployed scenarios of every entry point,
on Lambda's Python too.
"""

from __future__ import annotations

import re
import tomllib
from typing import Any

from infra.layer import PYTHON_VERSION, ROOT
from tests.infra.conftest import resources_of

LAMBDA_RUNTIME = f"python{PYTHON_VERSION}"


def makefile_variable(name: str) -> str:
    (value,) = re.findall(rf"^{name}\s*:=\s*(\S+)$", (ROOT / "Makefile").read_text(), re.M)
    return value


def test_every_function_and_layer_runs_on_the_python_the_layer_is_built_for(
    template: dict[str, Any], user_template: dict[str, Any]
) -> None:
    for stack in (template, user_template):
        functions = resources_of(stack, "AWS::Lambda::Function")
        assert functions
        assert {f["Runtime"] for f in functions.values()} == {LAMBDA_RUNTIME}
        for layer in resources_of(stack, "AWS::Lambda::LayerVersion").values():
            assert layer["CompatibleRuntimes"] == [LAMBDA_RUNTIME]


def test_the_code_is_checked_for_both_pythons() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    tested = pyproject["tool"]["mypy"]["python_version"]
    # Syntax: ruff targets the older of the two, so nothing newer than it slips in.
    older = min(tested, PYTHON_VERSION, key=lambda v: tuple(map(int, v.split("."))))
    assert pyproject["tool"]["ruff"]["target-version"] == "py" + older.replace(".", "")
    assert pyproject["project"]["requires-python"] == f">={older}"
    # The Makefile's second mypy pass and second test run use Lambda's version.
    assert makefile_variable("LAMBDA_PYTHON") == PYTHON_VERSION
    makefile = (ROOT / "Makefile").read_text()
    assert "$(BIN)/mypy --python-version $(LAMBDA_PYTHON)" in makefile
    assert "$(MAKE) test-lambda-python" in makefile

"""The two Lambda layer assets, built on this machine without Docker.

- dependencies: the runtime requirements of pyproject.toml, installed by pip as
  binary wheels for the Lambda platform (arm64, CPython 3.12). Built once per
  requirement set and cached under build/, so only a change of requirements
  downloads anything (from the package index, never from AWS).
- package: the dynacron package from the source tree, minus what never ships
  to Lambda (local mode and the command line, which need moto and typer).

Two layers rather than one: a code change re-uploads a few hundred kilobytes,
not the 25 MB of dependencies.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "layers" / "python" / "dynacron"
FUNCTIONS = ROOT / "functions"
CACHE = ROOT / "build" / "layers"
PLATFORM = "manylinux2014_aarch64"
PYTHON_VERSION = "3.12"
# The Lambda Python runtime provides the AWS SDK.
PROVIDED_BY_RUNTIME = frozenset({"boto3", "botocore"})
# Whole folders of the package never ship: the one-machine runtime, the console,
# the command line and capacity planning (docs/architecture.md).
NOT_SHIPPED = ("local", "console", "cli", "planning")
LEFT_OUT = shutil.ignore_patterns(*NOT_SHIPPED, "__pycache__", "*.pyc")


@dataclass(frozen=True)
class LayerAssets:
    """Directories laid out as Lambda layers expect (``python/...`` inside)."""

    dependencies: Path
    package: Path


def runtime_requirements(pyproject: Path = ROOT / "pyproject.toml") -> list[str]:
    """The pinned runtime dependencies the layer ships, from [project].dependencies."""
    project = tomllib.loads(pyproject.read_text())["project"]
    requirements: list[str] = project["dependencies"]
    return [r for r in requirements if _name(r) not in PROVIDED_BY_RUNTIME]


def build_package_layer(target: Path) -> Path:
    """Copy the dynacron package into ``target/python/dynacron``; no network."""
    destination = target / "python" / "dynacron"
    shutil.rmtree(target / "python", ignore_errors=True)
    shutil.copytree(PACKAGE, destination, ignore=LEFT_OUT)
    return target


def build_dependencies_layer(cache: Path = CACHE) -> Path:
    """Install the runtime requirements for Lambda's platform, or reuse a cached install."""
    requirements = runtime_requirements()
    key = hashlib.sha256(json.dumps([requirements, PLATFORM, PYTHON_VERSION]).encode()).hexdigest()[
        :16
    ]
    target = cache / f"dependencies-{key}"
    done = cache / f"dependencies-{key}.complete"
    if done.exists():
        return target
    shutil.rmtree(target, ignore_errors=True)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-warn-conflicts",
            "--no-compile",
            "--only-binary=:all:",
            "--platform",
            PLATFORM,
            "--implementation",
            "cp",
            "--python-version",
            PYTHON_VERSION,
            "--target",
            str(target / "python"),
            *requirements,
        ],
        check=True,
    )
    shutil.rmtree(target / "python" / "bin", ignore_errors=True)
    done.touch()
    return target


def build_layers(cache: Path = CACHE) -> LayerAssets:
    """Both layers as ``make synth`` deploys them."""
    return LayerAssets(
        dependencies=build_dependencies_layer(cache),
        package=build_package_layer(cache / "package"),
    )


def _name(requirement: str) -> str:
    return re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0].lower()

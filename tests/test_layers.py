"""The layer contract (pyproject.toml, [tool.importlinter]): the tree keeps it, every
module of gateway/ is in a layer, and a forbidden import fails the check."""

from __future__ import annotations

import pkgutil
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import gateway

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("gateway", "channels", "memory", "persona", "voice", "web")
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def contract() -> dict[str, object]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    (layers,) = config["tool"]["importlinter"]["contracts"]
    assert isinstance(layers, dict)
    return layers


def layered_modules() -> set[str]:
    layers = contract()["layers"]
    assert isinstance(layers, list)
    names: set[str] = set()
    for layer in layers:
        separator = "|" if "|" in layer else ":"
        names.update(name.strip() for name in layer.split(separator))
    return names


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--no-logo"],
        cwd=root,
        # The packages of ``root``, not the ones this process imported.
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_every_module_of_gateway_is_in_a_layer() -> None:
    # A layers contract checks only the modules it names: a new gateway module in no
    # layer would be free to import anything.
    children = {f"gateway.{m.name}" for m in pkgutil.iter_modules(gateway.__path__)}
    declared = {name for name in layered_modules() if name.startswith("gateway.")}
    assert children - declared == set(), "add the new gateway modules to a layer"
    assert declared - children == set(), "the contract names modules that do not exist"
    assert {"channels", "memory", "persona", "voice", "web"} <= layered_modules()


def test_the_tree_keeps_the_layers() -> None:
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 kept, 0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "forbidden"),
    [
        # The kernel imports no channel (Inbound and TurnEvent live in gateway/messages.py).
        ("gateway/hub.py", "channels.webchat"),
        # Only the app imports gateway.startup: this is caught because the module
        # is named in the kernel's layer, not through a chain from another one.
        ("gateway/startup.py", "memory.types"),
        # Nor the running Gateway object, which names a part of every layer.
        ("gateway/pipeline.py", "gateway.runtime"),
        ("memory/types.py", "persona.models"),
        ("persona/models.py", "voice.base"),
        # The panel reads the runtime, never the composition root.
        ("web/panel/render.py", "gateway.app"),
    ],
)
def test_a_forbidden_import_fails_the_check(tmp_path: Path, module: str, forbidden: str) -> None:
    for package in PACKAGES:
        shutil.copytree(
            ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    assert lint_imports(tmp_path).returncode == 0
    path = tmp_path / module
    path.write_text(
        path.read_text(encoding="utf-8") + f"\nimport {forbidden}  # noqa\n", encoding="utf-8"
    )
    result = lint_imports(tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    importer = module.removesuffix(".py").replace("/", ".")
    assert f"{importer} -> {forbidden}" in result.stdout
    assert "1 broken" in result.stdout

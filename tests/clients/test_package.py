"""The package itself (issue 30 §1): installable from its folder with httpx as its one dependency, and typed.
A check of what the sources import keeps a second dependency from creeping in unnoticed."""

from __future__ import annotations

import ast
import sys
import tomllib
from pathlib import Path

import pytest

pytestmark = [pytest.mark.topology_independent]

PACKAGE = Path(__file__).resolve().parents[2] / "clients" / "python"


def test_the_package_declares_httpx_alone_and_ships_its_type_marker():
    meta = tomllib.loads((PACKAGE / "pyproject.toml").read_text())
    assert meta["project"]["name"] == "likes-client"
    assert [d.split(">")[0].split("=")[0] for d in meta["project"]["dependencies"]] == ["httpx"]
    assert (PACKAGE / "likes_client" / "py.typed").exists()
    assert "py.typed" in meta["tool"]["setuptools"]["package-data"]["likes_client"]


def test_the_sources_import_the_standard_library_httpx_and_themselves_only():
    imported = set()
    for source in (PACKAGE / "likes_client").glob("*.py"):
        for node in ast.walk(ast.parse(source.read_text())):
            if isinstance(node, ast.Import):
                imported |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                imported.add(node.module.split(".")[0])
    assert imported - set(sys.stdlib_module_names) == {"httpx", "likes_client"}, imported

"""The documentation site (mkdocs.yml over docs/, README.md its home page) builds without a warning:
a broken link or anchor, a page left out of the nav, or an API reference that does not resolve
fails here, not only in `make docs`."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


@pytest.mark.slow
def test_the_site_builds_strictly_without_a_warning(tmp_path):
    site = tmp_path / "site"
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT, capture_output=True, text=True, timeout=240,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    output = build.stdout + build.stderr
    warnings = [line for line in output.splitlines() if "WARNING" in line or "ERROR" in line]
    assert build.returncode == 0 and not warnings, output
    home = (site / "index.html").read_text(encoding="utf-8")
    assert 'href="getting_started/"' in home  # README's docs/ links, relative to the site's root
    assert (site / "reference" / "environment" / "index.html").exists()


def test_the_readme_is_a_front_page_whose_links_lead_into_docs():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 300
    assert "make demo" in text and "make test" in text
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    local = [t for t in targets if "://" not in t]
    assert local, "README.md links into the site"
    for target in local:
        assert target.startswith("docs/"), f"README.md links to {target}: the site has only docs/ (its home is README)"
        assert (ROOT / target).exists(), f"README.md links to {target}, which does not exist"


def test_attribute_comments_become_docstrings_on_the_site():
    """docs/hooks.py reads the ``#:`` comment block right above an attribute (Sphinx's convention)."""
    hooks = pytest.importorskip("griffe") and _hooks()
    lines = ["class Sink:", "    #: What a reader sees:", "    #:", "    #: * ``exactly_once``", "    guarantee = 1",
             "    # a plain comment", "    other = 2"]
    assert hooks.comment_docstring(lines, 5) == "What a reader sees:\n\n* ``exactly_once``"
    assert hooks.comment_docstring(lines, 7) is None
    assert hooks.comment_docstring(lines, 1) is None


def _hooks():
    import importlib.util

    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs" / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

"""Build-time helpers of the documentation site (mkdocs.yml names this file as a hook and twice
as a griffe extension).

* As an MkDocs hook: the site's home page is README.md, so the front page on GitHub and the
  site's are one text. README.md links into the site as ``docs/<page>.md`` (right on GitHub);
  the generated ``index.md`` lives inside ``docs/``, so those links lose the ``docs/`` prefix.
* As a griffe extension (``StripSphinxRoles``): docstrings cite code with Sphinx roles
  (``:class:`~epochal.errors.PlanError```), which Markdown would show verbatim. They become
  optional cross-references: a link where the API reference documents the object, plain code
  where it does not (a module another page does not cover yet), never a warning.
* As a griffe extension (``AttributeComments``): the code documents attributes and dataclass
  fields with ``#:`` comments above them (Sphinx autodoc's convention), which griffe does not
  read; they become the attributes' docstrings, so ``Sink.guarantee`` or ``GraphResult.recoveries``
  are documented on the site as in the code.
"""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

import griffe

README = Path(__file__).resolve().parents[1] / "README.md"

#: ``](docs/...)`` in README.md: a link into the site.
_SITE_LINK = re.compile(r"\]\(docs/")


def home_page(readme: str) -> str:
    """README.md's text as the site's index.md (links relative to docs/)."""
    return _SITE_LINK.sub("](", readme)


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    files.append(File.generated(config, "index.md", content=home_page(README.read_text(encoding="utf-8"))))
    return files


#: ``:class:`X```, ``:meth:`~a.b.C.d```, ``:py:func:`f```...
_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|attr|exc|data|obj|const):`(~?)([^`<>]+?)`")


def strip_roles(text: str, scope: Any = None) -> str:
    """``:role:`~a.b.C``` as an optional cross-reference to ``a.b.C`` shown as ``C``; a name without
    a dot is looked up, as Sphinx does, in ``scope`` (a griffe object) and the objects around it."""

    def replace(match: re.Match[str]) -> str:
        short, target = match.group(1), match.group(2).strip()
        shown = target.rsplit(".", 1)[-1] if short else target
        shown = shown.removesuffix("()")
        target = target.removesuffix("()")
        if "." not in target:
            target = _qualify(target, scope)
        return (f'<autoref identifier="{html.escape(target)}" optional><code>{html.escape(shown)}</code>'
                "</autoref>")

    return _ROLE.sub(replace, text)


def _qualify(name: str, scope: Any) -> str:
    while scope is not None:
        if name in scope.members:
            return f"{scope.path}.{name}"
        scope = scope.parent
    return name


class StripSphinxRoles(griffe.Extension):
    """Rewrites the Sphinx roles of every docstring griffe loads (see the module docstring)."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        objects = [pkg]
        while objects:
            obj = objects.pop()
            if obj.docstring is not None and ":" in obj.docstring.value:
                scope = obj if obj.is_class or obj.is_module else obj.parent
                obj.docstring.value = strip_roles(obj.docstring.value, scope)
            objects.extend(member for member in obj.members.values() if not member.is_alias)


def comment_docstring(lines: list[str], lineno: int) -> str | None:
    """The ``#:`` comment block right above line ``lineno`` (1-based) of ``lines``, as text, or None."""
    block: list[str] = []
    index = lineno - 2
    while index >= 0 and lines[index].lstrip().startswith("#:"):
        block.append(lines[index].lstrip()[2:].removeprefix(" "))
        index -= 1
    return "\n".join(reversed(block)).strip() or None


class AttributeComments(griffe.Extension):
    """Gives an attribute without a docstring the ``#:`` comment above it (see the module docstring)."""

    def on_attribute_instance(self, *, attr: griffe.Attribute, **kwargs: Any) -> None:
        if attr.docstring is not None or attr.lineno is None:
            return
        try:
            lines = attr.module.lines
        except Exception:  # noqa: BLE001 - no source (a compiled module): nothing to read
            return
        text = comment_docstring(lines, attr.lineno)
        if text is not None:
            attr.docstring = griffe.Docstring(text, parent=attr, lineno=attr.lineno)

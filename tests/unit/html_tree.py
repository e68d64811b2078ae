"""A small DOM for tests: html.parser into a tree of Nodes (tag, attrs, children), with the
few queries the report page tests need. Parses both the page report.py writes and what
Chromium's --dump-dom prints."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from html.parser import HTMLParser

# Elements whose text reads apart from its neighbours' (words() puts a space around them).
BLOCK = frozenset(
    re.split(
        r"\s+",
        "article caption dd details div dl dt form h1 h2 h3 h4 header li main ol p section "
        "summary table td th tr ul",
    )
)
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "wbr"}


@dataclasses.dataclass
class Node:
    tag: str
    attrs: dict[str, str | None]
    children: list[Node | str] = dataclasses.field(default_factory=list)
    parent: Node | None = None

    def iter(self) -> Iterator[Node]:
        yield self
        for c in self.children:
            if isinstance(c, Node):
                yield from c.iter()

    def find_all(self, tag: str | None = None, **attrs: str) -> list[Node]:
        """Elements by tag and attributes; `class_` matches one class of the element."""
        out = []
        for n in self.iter():
            if tag is not None and n.tag != tag:
                continue
            ok = True
            for k, want in attrs.items():
                if k == "class_":
                    ok = ok and want in (n.attrs.get("class") or "").split()
                else:
                    ok = ok and n.attrs.get(k.replace("_", "-")) == want
            if ok:
                out.append(n)
        return out

    def find(self, tag: str | None = None, **attrs: str) -> Node:
        found = self.find_all(tag, **attrs)
        assert found, f"no <{tag}> with {attrs}"
        return found[0]

    def by_id(self, ident: str) -> Node:
        return self.find(None, id=ident)

    @property
    def text(self) -> str:
        parts: list[str] = []
        for c in self.children:
            if isinstance(c, str):
                parts.append(c)
            else:
                parts.append(f" {c.text} " if c.tag in BLOCK else c.text)
        return "".join(parts)

    @property
    def words(self) -> str:
        """The text with whitespace collapsed."""
        return re.sub(r"\s+", " ", self.text).strip()

    def has(self, attr: str) -> bool:
        return attr in self.attrs


class _Builder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#document", {})
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, dict(attrs), parent=self.stack[-1])
        self.stack[-1].children.append(node)
        if tag not in VOID:
            self.stack.append(node)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.stack[-1].children.append(Node(tag, dict(attrs), parent=self.stack[-1]))

    def handle_endtag(self, tag: str) -> None:
        if tag in VOID:
            return
        for i in range(len(self.stack) - 1, 0, -1):
            if self.stack[i].tag == tag:
                del self.stack[i:]
                return
        raise AssertionError(f"</{tag}> closes nothing open")

    def handle_data(self, data: str) -> None:
        self.stack[-1].children.append(data)


def parse(text: str) -> Node:
    """The document's tree; every element must be closed (report.py writes no implied end)."""
    builder = _Builder()
    builder.feed(text)
    builder.close()
    assert builder.stack == [builder.root], f"unclosed: {[n.tag for n in builder.stack[1:]]}"
    return builder.root

"""The code blocks of the documentation site (docs/*.md, and README.md, whose two
commands and tour the site includes), for the tests that run them.

A fenced block whose language is ``python`` or ``sh`` runs, unless its title says it is
illustrative: ```` ```sh title="Illustrative: needs a Heroku app" ```` (the title is
shown on the page, so the reader sees why it is not run). Blocks of any other language
(output, SQL, a Procfile) are text.

The Python blocks of one page run in order in one namespace, in one interpreter (a
page is a session: a later block uses what an earlier one defined). The shell blocks
run in bash with ``-euo pipefail`` against a running system (see tests/test_docs.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]  # README.md: the tour the site includes
RUNNABLE = ("python", "sh")
FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[\w-]*)(?P<info>[^\n]*)\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.M | re.S)
TITLE = re.compile(r'title="(?P<title>[^"]*)"')


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    lang: str
    title: str
    code: str

    @property
    def illustrative(self) -> bool:
        return self.title.lower().startswith("illustrative:")

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def blocks(page: Path) -> list[Block]:
    """Every fenced block of ``page``, with its line, language, title and code
    (dedented to the fence's indent)."""
    text = page.read_text()
    found = []
    for m in FENCE.finditer(text):
        indent = len(m["indent"])
        code = "\n".join(line[indent:] for line in m["body"].splitlines())
        title = TITLE.search(m["info"])
        found.append(Block(page.relative_to(ROOT).as_posix(), text.count("\n", 0, m.start()) + 1,
                           m["lang"], title["title"] if title else "", code + "\n"))
    return found


def runnable(lang: str) -> dict[str, list[Block]]:
    """The runnable blocks of ``lang`` by page, in page order; pages without one left out."""
    by_page: dict[str, list[Block]] = {}
    for page in PAGES:
        for block in blocks(page):
            if block.lang == lang and not block.illustrative:
                by_page.setdefault(block.page, []).append(block)
    return by_page


PYTHON_SESSION = '''
import json, sys, traceback
namespace = {"__name__": "__docs__"}
for where, code in json.load(sys.stdin):
    try:
        exec(compile(code, where, "exec"), namespace)
    except BaseException:
        print(f"{where}: this block failed", file=sys.stderr)
        traceback.print_exc()
        sys.exit(1)
'''

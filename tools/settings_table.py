"""Write the configuration table of the docs from the settings code.

    python tools/settings_table.py          # rewrite docs/configuration.md's table
    python tools/settings_table.py --check  # exit 1 if the page is not current

Each row comes from one field of :class:`jobq.settings.Settings`: its variable
(:func:`jobq.settings.variable_name`), its default (a factory's docstring says what it
is), and its docstring. The table sits between two markers in the page; the rest of
the page is prose kept by hand.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pydantic_core import PydanticUndefined

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the checkout's settings, whatever is installed

from jobq.settings import Settings, variable_name  # noqa: E402

PAGE = ROOT / "docs" / "configuration.md"
START, END = "<!-- settings table: start (tools/settings_table.py) -->", "<!-- settings table: end -->"


def default_shown(field) -> str:
    """A field's default as the table shows it."""
    if field.default_factory is not None:
        return (field.default_factory.__doc__ or "computed").strip()
    value = field.default
    if value is None or value is PydanticUndefined or value == ():
        return "—"
    if isinstance(value, bool):
        return f"`{int(value)}`"
    if isinstance(value, tuple):
        return "`" + ",".join(value) + "`"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return f"`{value}`"


def table() -> str:
    """The Markdown table of every setting, in the order the code declares them."""
    rows = ["| variable | default | meaning |", "|---|---|---|"]
    for name, field in Settings.model_fields.items():
        if not field.description:
            raise SystemExit(f"tools/settings_table.py: Settings.{name} has no docstring to document it")
        meaning = " ".join(field.description.split()).replace("|", "\\|")
        rows.append(f"| `{variable_name(name)}` | {default_shown(field)} | {meaning} |")
    return "\n".join(rows)


def render(page: str) -> str:
    """``page`` with the text between the markers replaced by the current table."""
    head, _, rest = page.partition(START)
    _, _, tail = rest.partition(END)
    return f"{head}{START}\n{table()}\n{END}{tail}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the page is not current")
    args = parser.parse_args()
    page = PAGE.read_text()
    current = render(page)
    if args.check:
        if current != page:
            print(f"{PAGE}: the settings table is out of date; run python tools/settings_table.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(current)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""MkDocs hooks of the documentation site (mkdocs.yml ``hooks:``).

``on_files`` adds what lives outside ``docs/`` so that the site never holds a copy
that could drift:

- ``openapi.json``, the API's OpenAPI document as the app generates it (no database
  needed): the HTTP API page links the running code's contract;
- ``benchmarks/measurements.md`` (benchmark/README.md, every measurement with its
  date and conditions), ``benchmarks/peers.md`` (the latest peer harness run,
  benchmark/results/peers.md) and the plots they show.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[1]


def openapi_document() -> str:
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DATABASE_URL", "postgresql://localhost/unused")  # never connected to
    from web.app import create_app

    return json.dumps(create_app().api_doc, indent=2, sort_keys=True) + "\n"


def on_files(files, config):
    files.append(File.generated(config, "openapi.json", content=openapi_document()))
    bench = ROOT / "benchmark"
    files.append(File.generated(config, "benchmarks/measurements.md", abs_src_path=str(bench / "README.md")))
    files.append(File.generated(config, "benchmarks/peers.md", content=peers_page(bench / "results" / "peers.md")))
    for plot in sorted((bench / "results").glob("*.png")):
        files.append(File.generated(config, f"benchmarks/results/{plot.name}", abs_src_path=str(plot)))
    return files


def peers_page(path: Path) -> str:
    """The peer harness's latest run, with the commit that recorded it (its run id in the
    file is the date; outside a git checkout the commit is not known and not said)."""
    found = subprocess.run(["git", "log", "-1", "--format=%h (%cs)", "--", str(path)],
                           cwd=ROOT, capture_output=True, text=True)
    commit = f"Recorded by commit {found.stdout.strip()}.\n\n" if found.returncode == 0 and found.stdout.strip() else ""
    return "# The peer harness's latest run\n\n" + commit + path.read_text()

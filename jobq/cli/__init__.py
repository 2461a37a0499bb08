"""The ``jobq`` command line (also ``python -m jobq``): :mod:`.main` holds the group and
its commands, one module per command group beside it, all importing :mod:`.common`."""

from jobq.cli.main import main

__all__ = ["main"]

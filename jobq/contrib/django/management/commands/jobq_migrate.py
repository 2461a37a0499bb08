"""``manage.py jobq_migrate``: jobq's migrations on the project's database (``jobq
migrate``; :mod:`jobq.contrib.django.command`)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from jobq.contrib.django import command


class Command(BaseCommand):
    help = "Create or upgrade jobq's tables in this project's database."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--wait", type=float, default=None, help="Seconds to wait for the database to answer.")

    def handle(self, *args: Any, **options: Any) -> None:
        argv = ["migrate"] + (["--wait", str(options["wait"])] if options["wait"] is not None else [])
        command.run(argv, worker=False)

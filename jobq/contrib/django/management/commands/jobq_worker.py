"""``manage.py jobq_worker``: the jobq supervisor, its workers running the project's
tasks (:mod:`jobq.contrib.django.command`)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from jobq.contrib.django import command


class Command(BaseCommand):
    help = "Run jobq's supervisor: worker processes that run this project's tasks, and its maintenance process."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--concurrency", type=int, help="Worker processes [JOBQ_CONCURRENCY; CPU count].")
        parser.add_argument("--queues", help="Comma-separated queues to work [the jobq backends' QUEUES].")
        parser.add_argument("--all-queues", action="store_true", help="Work every queue that has jobs.")

    def handle(self, *args: Any, **options: Any) -> None:
        argv = ["worker"]
        if options["concurrency"] is not None:
            argv += ["--concurrency", str(options["concurrency"])]
        if options["all_queues"]:
            argv.append("--all-queues")
        elif options["queues"] or command.queues():
            argv += ["--queues", options["queues"] or ",".join(command.queues())]
        command.run(argv, worker=True)

"""The Django app of jobq's integration: what makes ``manage.py jobq_worker`` and
``manage.py jobq_migrate`` found (``INSTALLED_APPS = [..., "jobq.contrib.django"]``)."""

from __future__ import annotations

from django.apps import AppConfig


class JobqConfig(AppConfig):
    name = "jobq.contrib.django"
    label = "jobq"
    verbose_name = "jobq"

#!/usr/bin/env python
"""The small Django project of the django tests (tests/test_django.py): ``shop``, whose
tasks run on jobq. Its database is ``SHOP_DATABASE`` (a libpq URL)."""

import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "shop.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)

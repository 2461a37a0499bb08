"""Settings of the test project: PostgreSQL on psycopg 3 from ``SHOP_DATABASE``, and
Django's tasks on jobq."""

import os

from psycopg.conninfo import conninfo_to_dict

_db = conninfo_to_dict(os.environ["SHOP_DATABASE"])  # jobq_worker makes DATABASE_URL from DATABASES

SECRET_KEY = "test only"
USE_TZ = True
INSTALLED_APPS = ["django_tasks", "jobq.contrib.django", "shop"]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _db.get("dbname", ""),
        "USER": _db.get("user", ""),
        "PASSWORD": _db.get("password", ""),
        "HOST": _db.get("host", ""),
        "PORT": _db.get("port", ""),
    }
}
TASKS = {
    "default": {
        "BACKEND": "jobq.contrib.django.JobqBackend",
        "QUEUES": ["default", "emails"],
        "OPTIONS": {"MAX_RETRIES": 0},
    }
}
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"

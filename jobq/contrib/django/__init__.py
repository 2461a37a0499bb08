"""Django's tasks framework on jobq (extra ``jobq[django]``): add
``"jobq.contrib.django"`` to ``INSTALLED_APPS`` (for ``manage.py jobq_worker`` and
``jobq_migrate``) and name :class:`JobqBackend` in ``TASKS``. See
:mod:`jobq.contrib.django.backend`."""

from jobq.contrib.django.backend import JobqBackend

__all__ = ["JobqBackend"]

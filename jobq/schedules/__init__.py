"""Periodic jobs: cron slot arithmetic (:mod:`.cron`), what code declares
(:mod:`.declarations`, ``@jobq.periodic``), and the stored schedules operators act on
(:mod:`.stored`). The maintenance leader fires them (:mod:`jobq.daemon.maintenance`)."""

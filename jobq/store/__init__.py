"""Where jobq keeps its state: connections to PostgreSQL and the translation of their
errors (:mod:`.connections`), advisory lock keys (:mod:`.locks`), the schema and its
migrations (:mod:`.migrate`, ``migrations/``), the partitions of finished jobs and
retention (:mod:`.partitions`, :mod:`.retention`), the planner's statistics
(:mod:`.statistics`), the embedded server of ``jobq dev`` and the tests
(:mod:`.embedded`), and every DML statement (:mod:`.sql`)."""

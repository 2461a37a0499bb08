"""What a supervisor and its workers share in memory, one record per worker slot:
which workers wait idle (:mod:`.idle`), which job each runs (:mod:`.jobs`), and what
each has finished and not yet written (:mod:`.finished`)."""

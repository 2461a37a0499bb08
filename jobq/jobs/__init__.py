"""Jobs as the library hands them out: putting them in the queue (:mod:`.submit`, with
:mod:`.copy_rows` and :mod:`.group_commit`), reading the ledger (:mod:`.ledger`,
:mod:`.filters`, :mod:`.cursors`), acting on them (:mod:`.control`, bulk
:mod:`.operations`, :mod:`.audit`), their dead letters (:mod:`.dead_letters`), their
queues (:mod:`.queues`), and the lease protocol a worker follows (:mod:`.leases`)."""

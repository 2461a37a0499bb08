"""A worker process (:mod:`.loop`): what it has in hand (:mod:`.hand`), its claim
session (:mod:`.session`), its outcomes (:mod:`.outcomes`) and its heartbeat thread
(:mod:`.heartbeat`)."""

"""A worker process (:mod:`.loop`): its jobs in flight, each in its stage, held by one
object (:mod:`.flight`), its claim session (:mod:`.session`), what its runs come to and
how their outcomes are written (:mod:`.outcomes`), and its heartbeat thread
(:mod:`.heartbeat`)."""

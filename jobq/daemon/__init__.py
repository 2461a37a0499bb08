"""The daemon: the processes of ``jobq worker``.

A supervisor (:mod:`.supervisor`) forks worker processes (:mod:`.worker`) and one
maintenance process (:mod:`.maintenance`) and keeps them going. Everything here runs
in those processes; the library beside this package (enqueue, read, control, metrics,
SQL) is what a web process or a script imports, and it never imports the daemon.
"""

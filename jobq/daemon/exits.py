"""The exit codes of the supervisor's children: how a worker or the maintenance process
tells the supervisor why it left, so it knows whether to respawn it, halt, or count a crash."""

EXIT_OK = 0
# A configuration or schema problem found at start: respawning cannot help, the supervisor halts.
EXIT_BOOT_ERROR = 3
# A statement failed for a reason of its own (not a lost connection): the worker leaves
# without recording what it holds; its jobs go back to pending with no attempt charged.
EXIT_DATABASE_ERROR = 4

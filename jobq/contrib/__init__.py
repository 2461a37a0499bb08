"""Optional integrations, each behind an extra of its own (``jobq[sentry]``): the core
install neither needs nor imports them; an application imports the one it wants."""

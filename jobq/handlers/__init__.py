"""Handlers: the registry (:mod:`jobq.handlers.registry`) and the built-in job types."""

"""A free loopback TCP port."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port nobody listens on now on 127.0.0.1 (the kernel's pick; free until someone binds it)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])

"""Hosts for real on one machine: PostgreSQL in a network namespace of its own, and
"hosts", each a network namespace joined to the database's by a veth pair, each running
its own supervisor (``JOBQ_HOSTNAME`` = the host's name).

Addresses are in 10.231.0.0/16, which exists only inside these namespaces: host ``n``
is 10.231.n.2, the database's end of its pair 10.231.n.1/24. A host's namespace has a
route to its own /24 and nothing else, so traffic to any address outside the
namespaces is never sent. The test process itself reaches the database through its Unix
socket (the file system is not namespaced).

Faults are done to a host as a whole:

- ``partition``: the database's end of the host's pair goes down; the host's end loses
  its carrier. Nothing is closed: both sides see a silent peer (half-open), as a cut
  cable or a lost host looks. ``heal`` brings it back (and ends a one-way drop).
- One-way drops (no netem, nft or iptables needed): a permanent neighbour entry that
  gives the peer's address a MAC address nobody has, so that frames sent that way reach
  the other end of the pair and are dropped there (not addressed to it) while the other
  direction still flows. ``deafen``: the database's packets to the host are dropped, the
  host's still arrive (its queries run, their answers and ACKs never come back);
  ``mute``: the host's packets to the database are dropped, the database's still arrive.
  The sender gets no error: to it the peer has gone silent.
- ``freeze``: SIGSTOP of every process of the host (a frozen VM); ``thaw``: SIGCONT.
- ``kill``: SIGKILL of every process of the host (a lost host): its supervisor and its
  children, and every process started with :meth:`Host.run` (a CLI command, a Gunicorn).

Needs root (network namespaces) and iproute2's ``ip`` (``make test-hosts`` installs it
with apt-get where missing). :func:`require` fails the test naming what is missing:
such a test never counts as passed.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import pytest

from jobq.settings import DEFAULT_ADVISORY_NAMESPACE
from jobq.store.embedded import EmbeddedPostgres
from jobq.store.migrate import migrate
from support.daemon import Daemon, worker_pids_of_session
from support.db import TEST_SERVER_SETTINGS

PORT = 5432
SUBNET = "10.231"
NOBODY = "02:00:00:00:00:01"  # a locally administered MAC address no interface here has


def require() -> None:
    """Fail the test, saying why, unless network namespaces can be made here."""
    if os.geteuid() != 0:
        pytest.fail("the hosts harness needs root to make network namespaces (CI runs as root)")
    if shutil.which("ip") is None:
        pytest.fail("the hosts harness needs iproute2's ip: run 'make test-hosts' (it installs it) "
                    "or 'apt-get install iproute2'")


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


@dataclass
class Host:
    """One host: a network namespace and the supervisor it runs."""

    name: str
    namespace: str
    device: str  # the database's end of its veth pair, in the database's namespace
    db_namespace: str
    number: int
    daemon: Daemon | None = None
    others: list[subprocess.Popen] = field(default_factory=list)  # started by run(): they die with the host

    @property
    def address(self) -> str:
        return f"{SUBNET}.{self.number}.2"

    @property
    def database_address(self) -> str:
        return f"{SUBNET}.{self.number}.1"

    @property
    def database_url(self) -> str:
        return f"postgresql://postgres@{self.database_address}:{PORT}/postgres"

    def start(self, log_dir: Path, concurrency: int, **env: str) -> Daemon:
        self.daemon = Daemon(self.database_url, log_dir / f"{self.name}.log", concurrency,
                             JOBQ_HOSTNAME=self.name, **env)
        self.daemon.start(prefix=("ip", "netns", "exec", self.namespace))
        return self.daemon

    def run(self, args: list[str], log_path: Path, **env: str) -> subprocess.Popen:
        """Start ``args`` on this host (in its namespace, DATABASE_URL its database's
        address), in a session of its own, its output in ``log_path``; it dies with the host."""
        with open(log_path, "ab") as log:
            process = subprocess.Popen(["ip", "netns", "exec", self.namespace, *args], cwd=log_path.parent,
                                       env={**os.environ, "DATABASE_URL": self.database_url, **env},
                                       stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.others.append(process)
        return process

    def processes(self) -> list[int]:
        """Every live process of the host: its supervisor's session, and those of :meth:`run`."""
        sessions = [process.pid for process in self.others if process.poll() is None]
        if self.daemon is not None:
            sessions.append(self.daemon.pid)
        return [pid for sid in sessions for pid in (sid, *worker_pids_of_session(sid))]

    def partition(self) -> None:
        ip("-n", self.db_namespace, "link", "set", self.device, "down")

    def deafen(self) -> None:
        """Drop the database's packets to this host; the host's still arrive."""
        ip("-n", self.db_namespace, "neigh", "replace", self.address, "lladdr", NOBODY, "dev", self.device,
           "nud", "permanent")

    def mute(self) -> None:
        """Drop this host's packets to the database; the database's still arrive."""
        ip("-n", self.namespace, "neigh", "replace", self.database_address, "lladdr", NOBODY, "dev", "eth0",
           "nud", "permanent")

    def heal(self) -> None:
        """The link up again, both directions through (the neighbours learnt again by ARP)."""
        ip("-n", self.db_namespace, "link", "set", self.device, "up")
        for namespace, address, device in ((self.db_namespace, self.address, self.device),
                                           (self.namespace, self.database_address, "eth0")):
            subprocess.run(["ip", "-n", namespace, "neigh", "del", address, "dev", device], capture_output=True)

    def freeze(self) -> None:
        self._signal(signal.SIGSTOP)

    def thaw(self) -> None:
        self._signal(signal.SIGCONT)

    def kill(self) -> None:
        self._signal(signal.SIGKILL)

    def _signal(self, signum: int) -> None:
        for pid in self.processes():
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                pass


class Cluster:
    """The database's namespace and its server, and the hosts. Names carry the test
    process's pid: several pytest processes may each have a cluster at once."""

    def __init__(self, base_dir: Path, hosts: int) -> None:
        tag = f"jq{os.getpid() % 100000}"
        self.db_namespace = f"{tag}-db"
        self.hosts = [Host(f"host{n}", f"{tag}-h{n}", f"{tag}h{n}", self.db_namespace, n) for n in range(1, hosts + 1)]
        self.server = EmbeddedPostgres(base_dir / "pg", port=PORT, settings={
            **TEST_SERVER_SETTINGS, "listen_addresses": "0.0.0.0"})  # every address of its own namespace
        self.made: list[str] = []

    def up(self) -> None:
        """Make the namespaces and links, start PostgreSQL in its namespace (trusting the
        hosts' subnet), migrate it."""
        ip("netns", "add", self.db_namespace)
        self.made.append(self.db_namespace)
        ip("-n", self.db_namespace, "link", "set", "lo", "up")
        for host in self.hosts:
            ip("netns", "add", host.namespace)
            self.made.append(host.namespace)
            ip("link", "add", host.device, "netns", self.db_namespace, "type", "veth",
               "peer", "name", "eth0", "netns", host.namespace)
            ip("-n", self.db_namespace, "addr", "add", f"{SUBNET}.{host.number}.1/24", "dev", host.device)
            ip("-n", host.namespace, "addr", "add", f"{host.address}/24", "dev", "eth0")
            for namespace, device in ((self.db_namespace, host.device), (host.namespace, "eth0"), (host.namespace, "lo")):
                ip("-n", namespace, "link", "set", device, "up")
        self._start_server()
        hba = self.server.data_dir / "pg_hba.conf"
        hba.write_text(hba.read_text() + f"\nhost all all {SUBNET}.0.0/16 trust\n")
        with psycopg.connect(self.server.url(), autocommit=True) as conn:
            conn.execute("SELECT pg_reload_conf()")
            migrate(conn, namespace=DEFAULT_ADVISORY_NAMESPACE)

    def down(self) -> None:
        """Stop every host's processes and the server; remove the namespaces."""
        for host in self.hosts:
            for process in host.others:
                if process.poll() is None:
                    process.kill()
                process.wait()
            if host.daemon is not None:
                host.heal()
                host.thaw()
                host.daemon.stop()
        self.server.stop(mode="immediate")
        for namespace in reversed(self.made):
            subprocess.run(["ip", "netns", "del", namespace], capture_output=True)

    def url(self) -> str:
        """The database, for the test process: its Unix socket."""
        return self.server.url()

    def _start_server(self) -> None:
        """pg_ctl run from inside the database's namespace: the server it starts listens there."""
        code = ("import json, sys; from jobq.store.embedded import EmbeddedPostgres; "
                "EmbeddedPostgres(sys.argv[1], port=int(sys.argv[2]), settings=json.loads(sys.argv[3])).start()")
        subprocess.run(["ip", "netns", "exec", self.db_namespace, sys.executable, "-c", code,
                        str(self.server.base_dir), str(PORT), json.dumps(self.server.settings)], check=True, cwd="/")

"""Half-open connections: a worker's network path dies without a word.

A loopback TCP proxy stands between a worker and PostgreSQL and is told to stop
forwarding without closing anything: a blackhole, not a kill. A proxy that merely
stops reading is not one (its kernel still acknowledges every packet and keepalive
probe, and neither end would ever notice), so the proxy also attaches a socket filter
that drops every packet its sockets receive: to the worker and to the server, the
other end has vanished, as a lost host or a cut cable looks. Unprivileged, Linux only.

The test instance listens on loopback TCP besides its Unix socket (pgserver's default
is the socket only).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import struct
import sys
import threading
import time
from collections.abc import Iterator

import psycopg
import pytest

import jobq
import jobq.settings
from support.daemon import FAST, worker_pids, worker_pids_of_session
from support.db import TRUNCATE, advisory_locks, migrated_instance, scalar
from support.ports import free_port
from support.waiting import wait_for
from jobq.store import connections, keepalive
from jobq.store import locks
from jobq.store.embedded import EmbeddedPostgres
from web.pool import web_pool

pytestmark = [
    pytest.mark.db,
    pytest.mark.chaos,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the blackhole is a Linux socket filter"),
]

DEAD = 3  # JOBQ_DEAD_CONNECTION_TIMEOUT for these tests: keepalive idle 1 s, interval 1 s, user timeout 3 s
GRACE = 1  # JOBQ_CANCEL_GRACE for these tests
SERVER_DEAD = DEAD + GRACE + keepalive.SERVER_MARGIN  # what the server is asked to wait: 9 s
STALE = float(FAST["JOBQ_STALE_THRESHOLD"])
KEEPALIVE_TIME = SERVER_DEAD + 1  # the server drops a silent client at the first keepalive probe past SERVER_DEAD
SLACK = 5.0  # scheduling on a loaded machine: deadlines are generous, never a measure of speed
SERVER_SETTINGS = ("tcp_keepalives_idle", "tcp_keepalives_interval", "tcp_keepalives_count", "tcp_user_timeout",
                   "client_connection_check_interval")
SHOWN = "SELECT name, setting::int FROM pg_settings WHERE name = ANY(%s)"  # base units: s, ms

# Linux <linux/filter.h>: SO_ATTACH_FILTER takes a struct sock_fprog; one classic BPF
# instruction, BPF_RET | BPF_K with k = 0, keeps no byte of any packet.
SO_ATTACH_FILTER, SO_DETACH_FILTER = 26, 27
DROP_EVERY_PACKET = struct.pack("=HBBI", 0x06, 0, 0, 0)


def drop_every_packet(sock: socket.socket) -> None:
    """Make ``sock``'s kernel drop every packet it receives, before TCP sees it: no data,
    no ACK, no answer to a keepalive probe. Needs no privilege."""
    program = ctypes.create_string_buffer(DROP_EVERY_PACKET, len(DROP_EVERY_PACKET))
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, struct.pack("@HP", 1, ctypes.addressof(program)))


class BlackholeProxy:
    """Forwards 127.0.0.1:``port`` to ``target``, a thread per direction, until
    :meth:`blackhole`; :meth:`heal` lets new connections through again."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.links: list[tuple[socket.socket, socket.socket]] = []
        self.cut: set[int] = set()  # ids of links that never forward again
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, name="proxy-accept", daemon=True).start()

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    def blackhole(self) -> None:
        """Stop forwarding; every socket stays open and drops what reaches it, and new
        connections get no answer."""
        with self.lock:
            drop_every_packet(self.listener)
            for link in self.links:
                self.cut.add(id(link))
                for sock in link:
                    drop_every_packet(sock)

    def heal(self) -> None:
        """Let new connections through. The blackholed ones stay dead (both their ends
        gave up on them): they are closed."""
        with self.lock:
            self.listener.setsockopt(socket.SOL_SOCKET, SO_DETACH_FILTER, 0)
            dead = [link for link in self.links if id(link) in self.cut]
            self.links = [link for link in self.links if id(link) not in self.cut]
        for link in dead:
            for sock in link:
                sock.close()

    def close(self) -> None:
        with self.lock:
            links, self.links = self.links, []
        self.listener.close()
        for link in links:
            for sock in link:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
                server = socket.create_connection(self.target)
            except OSError:
                return  # closed
            link = (client, server)
            with self.lock:
                self.links.append(link)
            for source, sink in (link, link[::-1]):
                threading.Thread(target=self._pump, args=(link, source, sink), name="proxy-pump", daemon=True).start()

    def _pump(self, link: tuple[socket.socket, socket.socket], source: socket.socket, sink: socket.socket) -> None:
        while True:
            try:
                data = source.recv(65536)
            except OSError:
                return
            with self.lock:
                if id(link) in self.cut:
                    return  # read before the cut: dropped, as in flight
                try:
                    if not data:
                        sink.shutdown(socket.SHUT_WR)
                        return
                    sink.sendall(data)
                except OSError:
                    return


@pytest.fixture(scope="module")
def tcp_postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedPostgres]:
    """A migrated instance of this module's own that also listens on 127.0.0.1:<port>."""
    from support.handlers import LEDGER_CREATE

    with migrated_instance(tmp_path_factory.mktemp("tcp-pg"), port=free_port()) as server:
        with psycopg.connect(server.url(), autocommit=True) as conn:
            conn.execute(LEDGER_CREATE)
        yield server


@pytest.fixture
def proxy(tcp_postgres: EmbeddedPostgres) -> Iterator[BlackholeProxy]:
    assert tcp_postgres.port is not None
    forwarding = BlackholeProxy(("127.0.0.1", tcp_postgres.port))
    yield forwarding
    forwarding.close()


@pytest.fixture
def watch(tcp_postgres: EmbeddedPostgres) -> Iterator[psycopg.Connection]:
    """A direct (Unix socket) connection to empty tables."""
    with psycopg.connect(tcp_postgres.url(), autocommit=True) as conn:
        conn.execute(TRUNCATE)
        conn.execute("TRUNCATE test_ledger")
        yield conn


def server_settings(conn: psycopg.Connection) -> dict[str, int]:
    return dict(conn.execute(SHOWN, (list(SERVER_SETTINGS),)).fetchall())


def client_socket_options(conn: psycopg.Connection) -> dict[str, int]:
    with socket.socket(fileno=os.dup(conn.fileno())) as sock:
        return {
            "keepalive": sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE),
            "idle": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE),
            "interval": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL),
            "count": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT),
            "user_timeout_ms": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT),
        }


ASKED = {  # what JOBQ_DEAD_CONNECTION_TIMEOUT=3 with JOBQ_CANCEL_GRACE=1 asks of each session: 9 s
    "tcp_keepalives_idle": 3,
    "tcp_keepalives_interval": 1,
    "tcp_keepalives_count": keepalive.KEEPALIVE_PROBES,
    "tcp_user_timeout": 9000,
    "client_connection_check_interval": 1000,
}
ASKED_OF_THE_CLIENT = {"keepalive": 1, "idle": 1, "interval": 1, "count": keepalive.KEEPALIVE_PROBES, "user_timeout_ms": 3000}


@pytest.fixture
def dead_connection_setting(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """JOBQ_DEAD_CONNECTION_TIMEOUT=3 and JOBQ_CANCEL_GRACE=1 in this process's settings,
    for the test only."""
    monkeypatch.setenv("JOBQ_DEAD_CONNECTION_TIMEOUT", str(DEAD))
    monkeypatch.setenv("JOBQ_CANCEL_GRACE", str(GRACE))
    jobq.settings.reset()
    yield
    jobq.settings.reset()


def test_every_connection_jobq_opens_over_tcp_asks_both_ends_to_drop_a_vanished_peer(
    proxy, tcp_postgres, dead_connection_setting, monkeypatch
):
    with connections.connect(proxy.url()) as conn:  # the claim session's, the listener's, maintenance's, the CLI's
        assert server_settings(conn) == ASKED
        assert client_socket_options(conn) == ASKED_OF_THE_CLIENT
        assert conn.execute("SHOW tcp_keepalives_idle").fetchone() == ("3",)
        assert conn.execute("SHOW client_connection_check_interval").fetchone() == ("1s",)
    monkeypatch.setenv("DATABASE_URL", proxy.url())
    connections.close_default_pool()
    pools = {"library default": connections.default_pool(), "web": web_pool(proxy.url())}
    try:
        for name, pool in pools.items():
            with pool.connection() as conn:
                assert (name, server_settings(conn)) == (name, ASKED)
                assert (name, client_socket_options(conn)) == (name, ASKED_OF_THE_CLIENT)
    finally:
        pools["web"].close()
        connections.close_default_pool()


def test_over_a_unix_socket_the_tcp_settings_are_ignored_and_nothing_fails(tcp_postgres, dead_connection_setting):
    with connections.connect(tcp_postgres.url()) as conn:
        shown = server_settings(conn)
    assert shown == {**{name: 0 for name in SERVER_SETTINGS}, "client_connection_check_interval": 1000}


def test_the_url_keeps_its_own_options_and_they_win(proxy, dead_connection_setting):
    url = proxy.url() + "?options=-c%20tcp_keepalives_idle%3D7%20-c%20search_path%3Dmine&keepalives_count=5"
    with connections.connect(url) as conn:
        shown = server_settings(conn)
        assert conn.execute("SHOW search_path").fetchone() == ("mine",)
        assert client_socket_options(conn)["count"] == 5
    assert shown == {**ASKED, "tcp_keepalives_idle": 7}


def test_zero_turns_it_off(proxy):
    with connections.connect(proxy.url(), dead_connection_timeout=0) as conn:
        assert server_settings(conn)["client_connection_check_interval"] == 0
        assert client_socket_options(conn)["user_timeout_ms"] == 0


def test_a_server_that_refuses_the_check_interval_gets_the_keepalives_without_it(proxy, monkeypatch,
                                                                                 dead_connection_setting):
    # PostgreSQL 13 knows no client_connection_check_interval and refuses the
    # connection; a setting this server knows no more of stands in for it.
    monkeypatch.setattr(keepalive, "CHECK_INTERVAL", "jobq_test_unknown_setting")  # asked for
    monkeypatch.setattr(connections, "CHECK_INTERVAL", "jobq_test_unknown_setting")  # and left out when refused
    monkeypatch.setattr(connections, "_refuses_check_interval", set())
    for _ in range(2):  # the second connects at once without it
        with connections.connect(proxy.url(), dead_connection_timeout=DEAD) as conn:
            shown = server_settings(conn)
        assert shown == {**ASKED, "client_connection_check_interval": 0}
    assert connections._refuses_check_interval == {proxy.url()}


def test_a_blackholed_worker_loses_its_session_and_its_job_comes_back_and_completes_once(
    tcp_postgres, proxy, watch, daemon
):
    """The worker's network path dies mid-job, silently. The worker stops its handler
    once its connection has been dead for the dead-connection timeout; the server ends
    the vanished session later (timeout + grace + margin), which frees the job's
    advisory lock; a second supervisor's stale reaper takes the job back within that
    keepalive time + stale threshold; it completes once. Once the path is back, the
    first worker reconnects."""
    job = jobq.enqueue("ledger_slow_first", {"seconds": 60}, conn=watch)  # a first run that outlives the test
    settings = {"JOBQ_DEAD_CONNECTION_TIMEOUT": str(DEAD), "JOBQ_CANCEL_GRACE": str(GRACE), "JOBQ_GRACEFUL_TIMEOUT": "1"}
    blackholed = daemon(1, url=proxy.url(), **settings)
    wait_for(lambda: jobq.get(job.id, conn=watch).status == "running" and job.id in advisory_locks(watch), 30,
             "the job running through the proxy")
    holder = advisory_locks(watch)[job.id]
    assert scalar(watch, "SELECT host(client_addr) FROM pg_stat_activity WHERE pid = %s", holder) == "127.0.0.1"
    lease = jobq.get(job.id, conn=watch).lease
    direct = daemon(1, url=tcp_postgres.url(), **settings)
    wait_for(lambda: len(worker_pids(watch)) == 2, 30, "the direct supervisor's worker registered")

    proxy.blackhole()
    cut = time.monotonic()
    seen: dict[str, float] = {}
    while not {"done", "worker noticed"} <= seen.keys() and time.monotonic() - cut < KEEPALIVE_TIME + STALE + 2 * SLACK:
        now = time.monotonic() - cut
        if "session ended" not in seen and not scalar(watch, "SELECT count(*) FROM pg_stat_activity WHERE pid = %s", holder):
            seen["session ended"] = now
        if "lock freed" not in seen and advisory_locks(watch).get(job.id) != holder:
            seen["lock freed"] = now
        current = jobq.get(job.id, conn=watch)
        if "back" not in seen and current.lease != lease:
            seen["back"] = now
            assert "session ended" in seen, "the job was taken back while its worker's session was alive"
        if "done" not in seen and current.status == "done":
            seen["done"] = now
        if "worker noticed" not in seen and "worker.connection_lost" in blackholed.log():
            seen["worker noticed"] = now
        if "handler stopped" not in seen and f"job.stopped id={job.id} " in blackholed.log():
            seen["handler stopped"] = now
        time.sleep(0.05)
    print("\nblackhole | " + " | ".join(f"{event} after {at:.2f} s" for event, at in seen.items()))

    assert seen.get("session ended", 1e9) <= KEEPALIVE_TIME + SLACK  # vs about two hours without keepalives
    assert seen.get("lock freed", 1e9) <= KEEPALIVE_TIME + SLACK
    assert seen.get("back", 1e9) <= KEEPALIVE_TIME + STALE + SLACK
    assert "done" in seen
    assert seen.get("worker noticed", 1e9) <= KEEPALIVE_TIME + SLACK  # its own claim session, not hung for minutes
    # Its first run was stopped before the server freed the lock: never two runs at once.
    assert seen.get("handler stopped", 1e9) < seen["session ended"] and seen["handler stopped"] <= DEAD + SLACK
    finished = jobq.get(job.id, conn=watch)
    assert finished.attempt == 1 and [e["error"] for e in finished.errors] == ["worker lost"]
    ran = watch.execute("SELECT pid FROM test_ledger WHERE job_id = %s", (job.id,)).fetchall()
    assert len(ran) == 1 and ran[0][0] in worker_pids_of_session(direct.pid)  # once, by the direct worker

    proxy.heal()
    wait_for(lambda: "worker.reconnected" in blackholed.log(), 2 * DEAD + 2 * SLACK, "the blackholed worker reconnected")
    assert jobq.get(job.id, conn=watch).status == "done"  # its reconnect took nothing back
    blackholed.signal(signal.SIGKILL)  # its first run still sleeps: it never completes
    wait_for(lambda: not [key for key in advisory_locks(watch) if key <= locks.MAX_JOB_ID], SLACK, "no job lock left")
    assert len(watch.execute("SELECT 1 FROM test_ledger WHERE job_id = %s", (job.id,)).fetchall()) == 1

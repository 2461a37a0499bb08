"""The job board: what each worker runs, in shared memory, read whole or not at all."""

import os
import struct

import pytest

from jobq.daemon.boards.jobs import JobBoard
from jobq.daemon.messages import Started

pytestmark = pytest.mark.unit


def test_a_slot_shows_the_job_its_worker_runs_and_nothing_once_idle():
    board = JobBoard(4)
    assert board.running(2) is None
    board.show(2, Started(17, 170, 1234.5, 60.0))
    assert board.running(2) == Started(17, 170, 1234.5, 60.0)
    assert board.running(1) is None and board.running(3) is None
    board.show(2, None)
    assert board.running(2) is None


def test_a_forked_worker_writes_what_its_supervisor_reads():
    board = JobBoard(2)
    pid = os.fork()
    if pid == 0:
        board.show(1, Started(5, 50, 99.0, 2.0))
        os._exit(0)
    os.waitpid(pid, 0)
    assert board.running(1) == Started(5, 50, 99.0, 2.0)


def test_a_writer_that_died_mid_write_leaves_no_job_and_the_next_writer_starts_afresh():
    board = JobBoard(1)
    board.show(0, Started(5, 50, 99.0, 2.0))
    (sequence,) = struct.unpack_from("=Q", board._board, 0)
    struct.pack_into("=Q", board._board, 0, sequence + 1)  # stopped between its two sequence writes
    assert board.running(0) is None
    board.show(0, Started(6, 60, 100.0, 2.0))
    assert board.running(0) == Started(6, 60, 100.0, 2.0)
    (sequence,) = struct.unpack_from("=Q", board._board, 0)
    assert sequence % 2 == 0

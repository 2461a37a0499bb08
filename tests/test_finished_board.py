"""The finished board: the jobs a worker finished and has not written yet, in shared
memory, passed on whole to maintenance when the worker dies."""

import os

import pytest

from jobq.daemon import reports
from jobq.daemon.finished import AREA, Finished, FinishedBoard

pytestmark = pytest.mark.unit


def note(board: FinishedBoard, slot: int, finished: Finished) -> bool:
    return board.note(slot, finished.job_id, finished.lease, finished.seconds, finished.result)


def test_a_slot_holds_what_was_noted_until_it_is_written():
    board = FinishedBoard(3)
    first, second = Finished(7, 70, 0.25, '{"pid": 1}'), Finished(8, 80, 0.5, None)
    assert note(board, 1, first) and note(board, 1, second)
    assert board.take(2) == []
    upto = board.end(1)
    note(board, 1, Finished(9, 90, 0.125, "[]"))  # noted while the write of the first two ran
    board.written(1, upto)
    assert board.take(1) == [Finished(9, 90, 0.125, "[]")]
    assert board.take(1) == []  # taking clears the slot


def test_a_slot_written_in_full_starts_again_from_its_first_byte():
    board = FinishedBoard(1)
    note(board, 0, Finished(1, 10, 0.0, None))
    board.written(0, board.end(0))
    assert board.end(0) == 0
    note(board, 0, Finished(2, 20, 0.0, None))
    assert board.take(0) == [Finished(2, 20, 0.0, None)]


def test_a_result_that_does_not_fit_is_not_noted():
    board = FinishedBoard(1)
    assert not note(board, 0, Finished(1, 10, 0.0, '"' + "x" * AREA + '"'))
    notes = 0
    while note(board, 0, Finished(notes, 1, 0.0, '"' + "y" * 200 + '"')):
        notes += 1
    assert 0 < notes < AREA // 200
    assert len(board.take(0)) == notes


def test_a_forked_worker_notes_what_its_supervisor_takes_after_its_death():
    board = FinishedBoard(2)
    pid = os.fork()
    if pid == 0:
        note(board, 1, Finished(5, 50, 1.5, '{"ok": "sp ace"}'))
        os._exit(0)
    os.waitpid(pid, 0)
    assert board.take(1) == [Finished(5, 50, 1.5, '{"ok": "sp ace"}')]


def test_a_gone_report_carries_the_finished_jobs_through_the_pipe():
    finished = (Finished(5, 50, 1.5, '{"a": "b c"}'), Finished(6, 60, 1e-05, None))
    gone = reports.Gone("host:1:ab", 7, 70, "crash", 30.0, "killed by signal 9 (SIGKILL)", finished)
    other = reports.Gone("host:2:cd", 0, 0, "shutdown", 0.0, "exit code 0")
    read_fd, write_fd = reports.report_pipe()
    data = reports.encode(gone) + reports.encode(other)
    os.write(write_fd, data[:20])  # a message may arrive in pieces
    reader = reports.Reader(read_fd)
    assert reader.read() == ([], False)
    os.write(write_fd, data[20:])
    assert reader.read() == ([gone, other], False)
    os.close(write_fd)
    os.close(read_fd)


def test_a_job_it_had_finished_is_not_the_job_a_gone_worker_was_running():
    running = reports.Started(5, 50, 100.0, 30.0)
    gone = reports.Gone.of("host:1:ab", running, "crash", 9, [Finished(5, 50, 0.1, None)])
    assert (gone.job_id, gone.lease) == (0, 0)
    gone = reports.Gone.of("host:1:ab", running, "crash", 9, [Finished(4, 40, 0.1, None)])
    assert (gone.job_id, gone.lease) == (5, 50)

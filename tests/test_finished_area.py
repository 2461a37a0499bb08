"""The finished area: the jobs a worker finished and has not written yet, in memory
shared with its supervisor, passed on whole to maintenance when the worker dies."""

import os

import pytest

from jobq.daemon import messages
from jobq.daemon.boards.finished import AREA, Failure, Finished, FinishedArea

pytestmark = pytest.mark.unit


def note(area: FinishedArea, finished: Finished) -> bool:
    return area.note(finished.job_id, finished.lease, finished.seconds, finished.result, finished.failure,
                     finished.snooze)


SNOOZED = Finished(11, 110, 0.25, None, snooze=2.5)
FAILED = Finished(9, 90, 0.5, None, Failure('Traceback (most recent call last):\n  ...\nValueError: "x y"', 12.5, 2, "00-a-b-01"))


def test_an_area_holds_what_was_noted_until_it_is_written():
    area = FinishedArea()
    assert note(area, Finished(7, 70, 0.25, '{"pid": 1}')) and note(area, Finished(8, 80, 0.5, None))
    upto = area.end()
    note(area, Finished(9, 90, 0.125, "[]"))  # noted while the write of the first two ran
    note(area, FAILED)
    note(area, Finished(10, 100, 0.0, None, Failure("E", 0.0)))
    note(area, SNOOZED)
    area.written(upto)
    assert area.take() == [Finished(9, 90, 0.125, "[]"), FAILED, Finished(10, 100, 0.0, None, Failure("E", 0.0)), SNOOZED]
    assert area.take() == []  # taking empties it


def test_an_area_written_in_full_starts_again_from_its_first_byte():
    area = FinishedArea()
    note(area, Finished(1, 10, 0.0, None))
    area.written(area.end())
    assert area.end() == 0
    note(area, Finished(2, 20, 0.0, None))
    assert area.take() == [Finished(2, 20, 0.0, None)]


def test_a_result_that_does_not_fit_is_not_noted():
    area = FinishedArea()
    assert not note(area, Finished(1, 10, 0.0, '"' + "x" * AREA + '"'))
    notes = 0
    while note(area, Finished(notes, 1, 0.0, '"' + "y" * 200 + '"')):
        notes += 1
    assert 0 < notes < AREA // 200
    assert len(area.take()) == notes


def test_a_forked_worker_notes_what_its_supervisor_takes_after_its_death():
    area = FinishedArea()
    pid = os.fork()
    if pid == 0:
        note(area, Finished(5, 50, 1.5, '{"ok": "sp ace"}'))
        os._exit(0)
    os.waitpid(pid, 0)
    assert area.take() == [Finished(5, 50, 1.5, '{"ok": "sp ace"}')]
    area.close()


def test_a_gone_report_carries_the_finished_jobs_through_the_pipe():
    finished = (Finished(5, 50, 1.5, '{"a": "b c"}'), Finished(6, 60, 1e-05, None), FAILED, SNOOZED)
    gone = messages.Gone("host:1:ab", 7, 70, "crash", 30.0, "killed by signal 9 (SIGKILL)", finished)
    other = messages.Gone("host:2:cd", 0, 0, "shutdown", 0.0, "exit code 0")
    read_fd, write_fd = messages.report_pipe()
    data = messages.encode(gone) + messages.encode(other)
    os.write(write_fd, data[:20])  # a message may arrive in pieces
    reader = messages.Reader(read_fd)
    assert reader.read() == ([], False)
    os.write(write_fd, data[20:])
    assert reader.read() == ([gone, other], False)
    os.close(write_fd)
    os.close(read_fd)


def test_a_job_it_had_finished_is_not_the_job_a_gone_worker_was_running():
    running = messages.Started(5, 50, 100.0, 30.0)
    gone = messages.Gone.of("host:1:ab", running, "crash", 9, [Finished(5, 50, 0.1, None)])
    assert (gone.job_id, gone.lease) == (0, 0)
    gone = messages.Gone.of("host:1:ab", running, "crash", 9, [Finished(4, 40, 0.1, None)])
    assert (gone.job_id, gone.lease) == (5, 50)

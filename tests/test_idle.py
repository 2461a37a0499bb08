import pytest

from jobq.daemon import idle

pytestmark = pytest.mark.unit


def test_a_notification_for_n_jobs_wakes_the_n_lowest_idle_workers():
    board = idle.IdleBoard(8)
    for slot in (1, 3, 4, 6):
        board.mark(slot, True)
    assert [slot for slot in (1, 3, 4, 6) if board.wakes(slot, 1)] == [1]
    assert [slot for slot in (1, 3, 4, 6) if board.wakes(slot, 2)] == [1, 3]
    assert [slot for slot in (1, 3, 4, 6) if board.wakes(slot, 10)] == [1, 3, 4, 6]


def test_a_busy_worker_does_not_hold_the_others_back():
    board = idle.IdleBoard(4)
    board.mark(2, True)
    board.mark(0, True)
    board.mark(0, False)  # slot 0 took a job
    assert board.wakes(2, 1)


@pytest.mark.parametrize(
    ("payload", "expected"),
    [("default 3", ("default", 3)), ("my queue 12", ("my queue", 12)), ("default", ("default", idle.SLOTS)),
     ("", ("", idle.SLOTS)), ("q x", ("q x", idle.SLOTS))],
)
def test_payloads_name_the_queue_and_the_number_of_jobs(payload, expected):
    assert idle.parse(payload) == expected

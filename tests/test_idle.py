import pytest

from jobq.daemon.boards import idle

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


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(idle.time, "monotonic", clock)
    return clock


def board_with_idle(*slots: int) -> idle.IdleBoard:
    board = idle.IdleBoard(4)
    for slot in slots:
        board.mark(slot, True)
    return board


def test_a_notification_left_to_a_lower_worker_that_does_not_read_it_is_taken_over(clock):
    board = board_with_idle(0, 2)
    low, high = board.seat(0), board.seat(2)
    high.reading()
    assert not high.wakes(1)  # slot 0 is idle and lower: left to it
    assert high.next_look() == 100.0 + idle.TAKE_OVER
    assert not high.take_over(clock.now)  # not yet: slot 0 has TAKE_OVER to read it
    clock.now += idle.TAKE_OVER
    assert high.take_over(clock.now)  # slot 0 still idle and has not read its connection: take it
    assert high.next_look() is None
    assert not board.idle(0)  # covered: the workers above do not leave it anything more
    low.reading()
    assert board.idle(0)  # awake again, and idle


def test_only_the_lowest_awake_worker_takes_over_from_a_sleeper(clock):
    board = board_with_idle(0, 1, 2)
    middle, high = board.seat(1), board.seat(2)
    assert not middle.wakes(1) and not high.wakes(1)  # both leave it to slot 0
    clock.now += idle.TAKE_OVER
    assert not high.take_over(clock.now)  # slot 1, awake and lower, is in line
    assert middle.take_over(clock.now)


def test_a_lower_worker_that_read_its_connection_or_left_keeps_the_notification(clock):
    board = board_with_idle(0, 1, 3)
    high = board.seat(3)
    assert not high.wakes(2)  # left to slots 0 and 1
    board.seat(0).reading()  # slot 0 woke and reads
    board.mark(1, False)  # slot 1 took a job
    clock.now += idle.TAKE_OVER
    assert not high.take_over(clock.now)
    assert high.wakes(3)  # more jobs than idle workers below: take it at once
    assert high.next_look() is None

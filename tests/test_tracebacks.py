"""A failed handler's traceback (jobq.handlers.tracebacks): the text traceback.format_exc()
makes, for every shape of exception, the second time as the first. Pure: no database."""

import traceback

import pytest

from jobq.handlers import tracebacks

pytestmark = pytest.mark.unit


def lookup(x):
    return {"a": 1}["b"] + x


def handler():
    return lookup(1)


def caused():
    try:
        lookup(1)
    except KeyError as exc:
        raise ValueError("wrapped") from exc


def in_handling():
    try:
        lookup(1)
    except KeyError:
        return 1 / 0


def context_hidden():
    try:
        lookup(1)
    except KeyError:
        raise ValueError("clean") from None


def group():
    raise ExceptionGroup("several", [ValueError("a"), TypeError("b")])


def recursing(n):
    return recursing(n - 1) if n else lookup(0)


def across_lines():
    return (1 +
            None)


def noted():
    exc = ValueError("with a note")
    exc.add_note("the note")
    raise exc


class Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("no text")


def unprintable():
    raise Unprintable()


def bad_syntax():
    compile("1 +", "<payload>", "exec")


SHAPES = [handler, caused, in_handling, context_hidden, group, lambda: recursing(40), across_lines, noted,
          unprintable, bad_syntax]


@pytest.mark.parametrize("fails", SHAPES, ids=lambda f: f.__name__)
def test_a_failure_reads_as_format_exc_makes_it_the_first_time_and_the_next(fails):
    texts = []
    for _ in range(3):
        try:
            fails()
        except Exception:
            texts.append((traceback.format_exc(), tracebacks.format_current()))
    for expected, ours in texts:
        assert ours == expected
    assert "Traceback (most recent call last):" in texts[0][1]


def test_the_same_place_with_another_message_keeps_the_frames_and_shows_the_new_message():
    def fails(key):
        return {}[key]

    seen = []
    for key in ("first", "second"):
        try:
            fails(key)
        except KeyError:
            seen.append(tracebacks.format_current())
    assert seen[0].endswith("KeyError: 'first'\n") and seen[1].endswith("KeyError: 'second'\n")
    assert seen[0].rsplit("KeyError", 1)[0] == seen[1].rsplit("KeyError", 1)[0]


def test_another_place_on_the_same_line_of_the_caller_is_its_own_stack():
    def two(which):
        return {"x": 1}["y"] if which else [][0]  # two failing expressions on one line

    for which in (True, False, True):
        try:
            two(which)
        except LookupError:
            assert tracebacks.format_current() == traceback.format_exc()

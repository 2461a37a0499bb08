import pytest

import jobq
from jobq.errors import AlreadyReplayed, DeadLetterNotFound
from support.claims import drain

pytestmark = [pytest.mark.db, pytest.mark.dlq]


@pytest.fixture
def dead(conn):
    jobq.enqueue("always_fail", {"k": "v"}, priority=7, max_retries=0, queue="mail", conn=conn)
    drain(conn, queues=["mail"])
    (row,) = jobq.list_dead(conn=conn).items
    return row


def test_replay_enqueues_a_new_pending_job_and_records_it(conn, dead):
    job = jobq.replay(dead.id, conn=conn)
    assert job.id != dead.original_id
    assert (job.status, job.type, job.payload, job.priority, job.queue, job.attempt) == (
        "pending", "always_fail", {"k": "v"}, 7, "mail", 0,
    )
    row = jobq.get_dead(dead.id, conn=conn)
    assert row.replayed_as == job.id and row.replayed_at is not None


def test_a_second_replay_is_refused(conn, dead):
    first = jobq.replay(dead.id, conn=conn)
    with pytest.raises(AlreadyReplayed) as caught:
        jobq.replay(dead.id, conn=conn)
    assert caught.value.replayed_as == first.id
    assert jobq.list_jobs(status="pending", conn=conn).total == 1


def test_replay_and_get_of_a_missing_row_raise_not_found(conn):
    with pytest.raises(DeadLetterNotFound):
        jobq.replay(77, conn=conn)
    with pytest.raises(DeadLetterNotFound):
        jobq.get_dead(77, conn=conn)


def test_discard_deletes_the_row(conn, dead):
    jobq.discard_dead(dead.id, conn=conn)
    with pytest.raises(DeadLetterNotFound):
        jobq.discard_dead(dead.id, conn=conn)
    assert jobq.list_dead(conn=conn).total == 0


def test_list_dead_filters_by_type_and_paginates(conn):
    jobq.enqueue_many([{"type": "always_fail", "max_retries": 0}] * 3 + [{"type": "nope", "max_retries": 0}], conn=conn)
    drain(conn)
    assert jobq.list_dead(type="always_fail", conn=conn).total == 3
    page = jobq.list_dead(limit=2, offset=2, conn=conn)
    assert page.total == 4 and len(page.items) == 2
    everything = jobq.list_dead(conn=conn).items
    assert [row.id for row in everything] == sorted((row.id for row in everything), reverse=True)


def test_a_dead_job_requeued_by_hand_that_dies_again_updates_its_dead_letter(conn, dead):
    # what operators do: put the dead job back with SQL, with or without a fresh attempt count
    conn.execute("UPDATE jobs SET status = 'pending', attempt = 0, run_at = now() WHERE id = %s", (dead.original_id,))
    drain(conn, queues=["mail"])
    (row,) = jobq.list_dead(conn=conn).items
    assert row.id == dead.id and row.original_id == dead.original_id
    assert row.attempts == 2 and len(row.errors) == 2
    assert row.died_at > dead.died_at and row.error == jobq.get(dead.original_id, conn=conn).error
    assert jobq.get(dead.original_id, conn=conn).status == "dead"

"""A SQLAlchemy Connection or Session bound to a psycopg 3 engine as ``conn=``: the job
is written in SQLAlchemy's transaction, and commits or rolls back with it."""

from __future__ import annotations

import psycopg
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.orm import Session

import jobq
from jobq.errors import InvalidArgument, JobNotFound

pytestmark = [pytest.mark.db, pytest.mark.sqlalchemy]


@pytest.fixture
def engine(conn, database_url):
    # The test database's URL is libpq's key=value form: psycopg connects, SQLAlchemy pools.
    engine = create_engine("postgresql+psycopg://", creator=lambda: psycopg.connect(database_url))
    conn.execute("CREATE TABLE IF NOT EXISTS orders (id int PRIMARY KEY)")
    conn.execute("TRUNCATE orders")
    yield engine
    engine.dispose()


def test_a_job_enqueued_on_a_session_commits_and_rolls_back_with_it(conn, engine):
    with Session(engine) as session:
        session.execute(text("INSERT INTO orders VALUES (1)"))
        kept = jobq.enqueue("receipt", {"order": 1}, conn=session)
        assert jobq.list_jobs(conn=conn).total == 0  # not committed yet
        session.commit()
        session.execute(text("INSERT INTO orders VALUES (2)"))
        dropped = jobq.enqueue("receipt", {"order": 2}, conn=session)
        session.rollback()
    assert jobq.get(kept.id, conn=conn).payload == {"order": 1}
    with pytest.raises(JobNotFound):
        jobq.get(dropped.id, conn=conn)
    assert conn.execute("SELECT array_agg(id) FROM orders").fetchone()[0] == [1]


def test_a_job_enqueued_on_a_connection_commits_and_rolls_back_with_it(conn, engine):
    with engine.connect() as connection:
        with connection.begin():
            kept = jobq.enqueue_many([{"type": "a"}, {"type": "b"}], conn=connection)
        transaction = connection.begin()
        dropped = jobq.enqueue("c", conn=connection)
        assert jobq.get(dropped.id, conn=connection).status == "pending"  # read back in its transaction
        transaction.rollback()
    assert [jobq.get(job.id, conn=conn).type for job in kept] == ["a", "b"]
    with pytest.raises(JobNotFound):
        jobq.get(dropped.id, conn=conn)


def test_a_connection_of_another_kind_is_refused_naming_conn(conn):
    with pytest.raises(InvalidArgument) as refused:
        jobq.enqueue("a", conn=object())
    assert refused.value.field == "conn"

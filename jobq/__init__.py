"""jobq: a background job queue that runs entirely on PostgreSQL.

    import jobq

    @jobq.register("send_email", timeout=60)
    def send_email(job):
        ...
        return {"delivered": True}

    jobq.enqueue("send_email", {"to": "a@example.com"}, priority=8)

Inside your own transaction, pass your connection: the job exists, and wakes a
worker, only when you commit:

    with psycopg.connect(url) as conn:
        conn.execute("INSERT INTO orders ...")
        jobq.enqueue("send_receipt", {"order": 17}, conn=conn)
"""

from jobq.jobs.dead_letters import discard as discard_dead, get as get_dead, list_dead, replay
from jobq.jobs.submit import enqueue, enqueue_many
from jobq.errors import (
    AlreadyReplayed,
    AlreadyRetried,
    BadPayload,
    Cancelled,
    Conflict,
    ConfigError,
    DatabaseUnavailable,
    DeadLetterNotFound,
    InvalidArgument,
    JobNotCancellable,
    JobNotDeletable,
    JobNotFound,
    JobNotRetryable,
    JobFailed,
    JobNotScheduled,
    JobqError,
    NotFound,
    Overloaded,
    Snooze,
    StepNotRetryable,
    UnknownJobType,
    WorkflowNotFound,
)
from jobq.handlers.registry import register
from jobq.schedules.declarations import periodic
from jobq.job import STATUSES, DeadLetter, Job
from jobq.jobs.control import cancel, delete, retry, run_now
from jobq.jobs.ledger import counts, get, list_jobs
from jobq.handlers.context import cancel_requested, progress
from jobq.workflows import (
    Workflow,
    WorkflowRun,
    cancel_workflow,
    chain,
    get_workflow,
    group,
    list_workflows,
    result,
    retry_workflow,
    spawn,
    step,
    wait,
)
from jobq.limits import clear_limit, list_limits, queue_limits, set_limit, set_queue_limits

__version__ = "0.1.0"

__all__ = [
    "STATUSES",
    "AlreadyReplayed",
    "AlreadyRetried",
    "BadPayload",
    "Cancelled",
    "ConfigError",
    "Conflict",
    "DatabaseUnavailable",
    "DeadLetter",
    "DeadLetterNotFound",
    "InvalidArgument",
    "Job",
    "JobNotCancellable",
    "JobNotDeletable",
    "JobNotFound",
    "JobNotRetryable",
    "JobFailed",
    "JobNotScheduled",
    "JobqError",
    "NotFound",
    "Overloaded",
    "Snooze",
    "StepNotRetryable",
    "UnknownJobType",
    "Workflow",
    "WorkflowNotFound",
    "WorkflowRun",
    "cancel",
    "cancel_requested",
    "cancel_workflow",
    "chain",
    "clear_limit",
    "delete",
    "counts",
    "discard_dead",
    "enqueue",
    "enqueue_many",
    "get",
    "get_dead",
    "get_workflow",
    "group",
    "list_dead",
    "list_jobs",
    "list_limits",
    "list_workflows",
    "periodic",
    "progress",
    "queue_limits",
    "register",
    "replay",
    "result",
    "retry",
    "retry_workflow",
    "run_now",
    "set_limit",
    "set_queue_limits",
    "spawn",
    "step",
    "wait",
]

"""Workflows: jobs with edges. A step waits (status ``waiting``) until its parents have
all finished; the database releases it in the transaction of its last parent's outcome
(migration 0015). Here: the definition (:mod:`.definition`: Workflow, step, chain,
group), its submission, stored runs, the operator's cancel and retry, and waiting for
jobs' ends (:mod:`.waiting`: wait, result)."""

from jobq.workflows.definition import Workflow, chain, group, step
from jobq.workflows.operations import cancel_workflow, retry_workflow
from jobq.workflows.runs import WorkflowRun, get_workflow, list_workflows
from jobq.workflows.spawn import spawn
from jobq.workflows.waiting import result, wait

__all__ = [
    "Workflow",
    "WorkflowRun",
    "cancel_workflow",
    "chain",
    "get_workflow",
    "group",
    "list_workflows",
    "result",
    "retry_workflow",
    "spawn",
    "step",
    "wait",
]

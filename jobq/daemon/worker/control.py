"""What an operator's action asks of a worker, through the supervisor: the control pipe
it reads on SIGUSR1 (:meth:`jobq.daemon.worker.loop.WorkerLoop.handle_control`)."""

from __future__ import annotations

from jobq.daemon import messages
from jobq.daemon.worker.flight import InFlight
from jobq.daemon.worker.lifeline import Lifeline
from jobq.handlers import context


def arrived(control: messages.Reader | None, in_flight: InFlight, lifeline: Lifeline | None) -> bool:
    """Read what the supervisor sent on the control pipe and mark it in the jobs in
    flight; True if the handler running now is to be stopped (a cancel of its job, or
    the lifeline's stop of a job no longer the worker's own), the first time only: a
    cancel heard again (found after a reconnect) or a stop after a cancel, arriving
    while the handler cleans up, must not interrupt its cleanup."""
    interrupt = lifeline is not None and lifeline.interrupting()  # its own stop of a job not its own
    sent: list[messages.Message] = []
    if control is not None:
        try:
            sent, _ = control.read()
        except ValueError:
            pass  # garbage on the pipe: nothing we can act on
    for message in sent:
        if isinstance(message, messages.Cancel):
            interrupt = in_flight.request_cancel(message.job_id) or interrupt
        elif isinstance(message, messages.Pause):
            in_flight.pause(message.queue)
    run = context.current()  # the run stopped, when interrupt is true
    if not interrupt or run is None or run.interrupted:
        return False
    run.interrupted = True
    return True

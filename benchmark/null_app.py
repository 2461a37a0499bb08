"""A WSGI app that does nothing: it reads the request's body and answers 201 with a
small JSON object, like ``POST /jobs`` without the queue (and 200 on ``/health``).
What a client can send to it is the most it can send to any server on this machine
(see client_ceiling.py)."""

BODY = b'{"id":1,"type":"noop","payload":{},"status":"pending"}'


def app(environ, start_response):
    environ["wsgi.input"].read()
    status = "201 Created" if environ["REQUEST_METHOD"] == "POST" else "200 OK"
    start_response(status, [("Content-Type", "application/json"), ("Content-Length", str(len(BODY)))])
    return [BODY]

"""A WSGI application for examples/limits-workers.toml: every request waits 5 ms on a
dependency (a database, another service: here a sleep) and answers a short text. Under
gunicorn's sync workers each worker holds one request at a time, so 2 workers serve about
2 / 5 ms = 400 requests per second whatever the load, with the CPUs nearly idle."""

import os
import time

DELAY_S = float(os.environ.get("SLOW_APP_DELAY_MS", "5")) / 1000.0
# Computing this long per request besides the wait (0: none).
SPIN_S = float(os.environ.get("SLOW_APP_SPIN_MS", "0")) / 1000.0
BODY = b"waited on the dependency\n"


def app(environ, start_response):
    end = time.process_time() + SPIN_S
    while time.process_time() < end:
        pass
    time.sleep(DELAY_S)
    start_response(
        "200 OK",
        [("Content-Type", "text/plain"), ("Content-Length", str(len(BODY)))],
    )
    return [BODY]

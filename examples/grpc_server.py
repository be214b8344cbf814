"""A unary gRPC server on grpcio (Debian's python3-grpcio), with no .proto: a generic handler
whose (de)serializers are the identity, so every message is its bytes.

Methods of service bench.Echo:
  /bench.Echo/Echo   answers the request message as it came (grpc-status 0)
  /bench.Echo/Fail   answers grpc-status 5 NOT_FOUND, grpc-message "no such key"

It counts the calls each method received and their messages' bytes. A line "count" on
standard input prints the counts as one JSON object on standard output (the tests'
independent count): {"Echo": calls, "Fail": calls, "bytes": {"Echo": bytes, "Fail": bytes}};
end of input is ignored.

  python3 grpc_server.py [--metrics FILE] [--work N] PORT [WORKERS [CERT KEY]]

With CERT and KEY (PEM files) it serves over TLS (grpcs://), ALPN h2. With --metrics it
rewrites FILE every 25 ms (a reading is then at most 25 ms late: a step's window edge) with its
counts (calls, request_bytes), the process's CPU seconds (all its threads: grpcio's C-core
pollers as well as Python's) and the time of writing (a stairbench target's
`metrics = { file = "{metrics}" }`), and once more after SIGTERM has stopped the server: the
final counts. With --work N each call also runs N iterations of a Python loop (CPU work under
the GIL, to tell one thread running Python from the server's CPUs).
"""

import json
import os
import signal
import sys
import threading
import time
from concurrent import futures

import grpc

counts = {"Echo": 0, "Fail": 0}
request_bytes = {"Echo": 0, "Fail": 0}
lock = threading.Lock()
work = 0


def count(method, request):
    with lock:
        counts[method] += 1
        request_bytes[method] += len(request)


def python_work():
    x = 0
    for i in range(work):
        x += i
    return x


def echo(request, context):
    count("Echo", request)
    if work:
        python_work()
    return request


def fail(request, context):
    count("Fail", request)
    context.abort(grpc.StatusCode.NOT_FOUND, "no such key")


def identity(b):
    return b


def handler():
    methods = {
        name: grpc.unary_unary_rpc_method_handler(
            fn, request_deserializer=identity, response_serializer=identity
        )
        for name, fn in (("Echo", echo), ("Fail", fail))
    }
    return grpc.method_handlers_generic_handler("bench.Echo", methods)


def snapshot():
    with lock:
        return dict(counts), dict(request_bytes)


def answer_counts():
    for line in sys.stdin:
        if line.strip() == "count":
            calls, sizes = snapshot()
            print(json.dumps(dict(calls, bytes=sizes)), flush=True)


def write_metrics(path):
    """Replaces the file whole (a reader never sees half of it). The counts, the CPU and the
    time are read under the lock: on a busy CPU this thread may wait tens of ms for the GIL
    between two reads, and the handlers cannot count meanwhile."""
    with lock:
        doc = {
            "calls": dict(counts),
            "request_bytes": dict(request_bytes),
            "cpu_s": time.process_time(),
            "written_unix_ns": time.time_ns(),
        }
    with open(path + ".tmp", "w") as f:
        json.dump(doc, f)
    os.replace(path + ".tmp", path)


def keep_writing(path, stopped):
    while not stopped.wait(0.025):
        write_metrics(path)


def option(args, name):
    """Removes `name VALUE` from args; its value or None."""
    if name not in args:
        return None
    i = args.index(name)
    value = args[i + 1]
    del args[i : i + 2]
    return value


def main():
    global work
    args = sys.argv[1:]
    metrics = option(args, "--metrics")
    work = int(option(args, "--work") or 0)
    port = int(args[0])
    workers = int(args[1]) if len(args) > 1 else 8
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=workers),
        options=[("grpc.max_concurrent_streams", 1000)],
    )
    server.add_generic_rpc_handlers((handler(),))
    if len(args) > 3:
        with open(args[2], "rb") as c, open(args[3], "rb") as k:
            creds = grpc.ssl_server_credentials([(k.read(), c.read())])
        server.add_secure_port(f"127.0.0.1:{port}", creds)
    else:
        server.add_insecure_port(f"127.0.0.1:{port}")
    # SIGTERM (stairbench's stop) ends wait_for_termination below: the final counts are
    # written after the server has stopped taking calls.
    signal.signal(signal.SIGTERM, lambda *_: server.stop(0.5))
    server.start()
    print(f"listening on {port}", flush=True)
    threading.Thread(target=answer_counts, daemon=True).start()
    stopped = threading.Event()
    if metrics:
        write_metrics(metrics)
        threading.Thread(target=keep_writing, args=(metrics, stopped), daemon=True).start()
    server.wait_for_termination()
    stopped.set()
    if metrics:
        write_metrics(metrics)


if __name__ == "__main__":
    main()

"""A unary gRPC server on grpcio (Debian's python3-grpcio), with no .proto: a generic handler
whose (de)serializers are the identity, so every message is its bytes.

Methods of service bench.Echo:
  /bench.Echo/Echo   answers the request message as it came (grpc-status 0)
  /bench.Echo/Fail   answers grpc-status 5 NOT_FOUND, grpc-message "no such key"

It counts the calls each method received. A line "count" on standard input prints the counts
as one JSON object on standard output (the tests' independent count); end of input is ignored.

  python3 grpc_server.py PORT [WORKERS [CERT KEY]]

With CERT and KEY (PEM files) it serves over TLS (grpcs://), ALPN h2.
"""

import json
import sys
import threading
from concurrent import futures

import grpc

counts = {"Echo": 0, "Fail": 0}
lock = threading.Lock()


def count(method):
    with lock:
        counts[method] += 1


def echo(request, context):
    count("Echo")
    return request


def fail(request, context):
    count("Fail")
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


def answer_counts():
    for line in sys.stdin:
        if line.strip() == "count":
            with lock:
                print(json.dumps(counts), flush=True)


def main():
    port = int(sys.argv[1])
    workers = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=workers),
        options=[("grpc.max_concurrent_streams", 1000)],
    )
    server.add_generic_rpc_handlers((handler(),))
    if len(sys.argv) > 4:
        with open(sys.argv[3], "rb") as c, open(sys.argv[4], "rb") as k:
            creds = grpc.ssl_server_credentials([(k.read(), c.read())])
        server.add_secure_port(f"127.0.0.1:{port}", creds)
    else:
        server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    print(f"listening on {port}", flush=True)
    threading.Thread(target=answer_counts, daemon=True).start()
    server.wait_for_termination()


if __name__ == "__main__":
    main()

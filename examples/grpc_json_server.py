"""A gRPC server for examples/greeter.proto on grpcio (Debian's python3-grpcio), its code
generated at start-up by grpcio-tools (python3-grpc-tools) from the same .proto stairbench
reads: each request is decoded by protobuf's own Python runtime, not by stairbench.

  python3 grpc_json_server.py PORT [--expect JSON] [--metadata KEY=VALUE]... [--record yes]

It counts the calls of each method; with --expect (a HelloRequest in protobuf's JSON mapping,
parsed by google.protobuf.json_format) it also counts the calls whose request equals it, field
for field; with --metadata, the calls that carried each KEY with VALUE (a `-bin` key's value
compared as the bytes grpcio decoded from base64). It records the largest and smallest
deadline left on arrival (context.time_remaining()) of the calls that had one. With --record
yes it keeps every request it decoded, as protobuf's JSON mapping gives it (MessageToDict), so
a test can check the values that vary per call.

The streaming methods count every request message they decode (`messages`, per method) and
every reply message they send (`replied`, per method); Gather and Chat also count their calls
by the number of request messages each had (`per_call`: {N: calls}).

A line "count" on standard input prints one JSON object on standard output:
{"calls": {METHOD: n}, "matched": n, "metadata_matched": n, "remaining_s": [min, max] | null,
 "messages": {METHOD: n}, "replied": {METHOD: n}, "per_call": {N: calls}};
a line "requests" prints the requests recorded (a JSON list) and forgets them.
"""

import json
import os
import sys
import tempfile
import threading
import time
from concurrent import futures

import grpc
from grpc_tools import protoc
from google.protobuf import json_format

HERE = os.path.dirname(os.path.abspath(__file__))


def generate():
    """greeter_pb2 and greeter_pb2_grpc, generated from greeter.proto into a temporary directory."""
    out = tempfile.mkdtemp(prefix="greeter-")
    code = protoc.main(
        ["protoc", f"-I{HERE}", f"--python_out={out}", f"--grpc_python_out={out}", "greeter.proto"]
    )
    if code != 0:
        sys.exit(f"grpc_tools.protoc failed ({code})")
    sys.path.insert(0, out)
    import greeter_pb2
    import greeter_pb2_grpc

    return greeter_pb2, greeter_pb2_grpc


pb2, pb2_grpc = generate()
lock = threading.Lock()
STREAMING = ["SayHellos", "Gather", "Chat"]
calls = {"SayHello": 0, "Exhausted": 0, "Slow": 0, **{m: 0 for m in STREAMING}}
messages = {m: 0 for m in STREAMING}
replied = {m: 0 for m in STREAMING}
per_call = {}
state = {"matched": 0, "metadata_matched": 0, "remaining": None}
expected = None
metadata = {}
recorded = None


def count(method, request, context, first=True):
    """One request message decoded; `first` when it begins its call (a stream's later
    messages count as messages, not calls)."""
    md = dict(context.invocation_metadata())
    remaining = context.time_remaining()
    with lock:
        calls[method] += int(first)
        if method in messages:
            messages[method] += 1
        if expected is not None and request == expected:
            state["matched"] += 1
        if metadata and all(md.get(k) == v for k, v in metadata.items()):
            state["metadata_matched"] += 1
        if recorded is not None:
            recorded.append(json_format.MessageToDict(request))
        if remaining is not None:
            lo, hi = state["remaining"] or (remaining, remaining)
            state["remaining"] = (min(lo, remaining), max(hi, remaining))


def reply(method, name):
    with lock:
        replied[method] += 1
    return pb2.HelloReply(message=f"hello {name}")


def stream_ended(n):
    with lock:
        per_call[n] = per_call.get(n, 0) + 1


class Greeter(pb2_grpc.GreeterServicer):
    def SayHello(self, request, context):
        count("SayHello", request, context)
        return pb2.HelloReply(message=f"hello {request.user.name}")

    def Exhausted(self, request, context):
        count("Exhausted", request, context)
        context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "over quota")

    def Slow(self, request, context):
        count("Slow", request, context)
        time.sleep(0.3)
        return pb2.HelloReply(message=f"hello {request.user.name}")

    def SayHellos(self, request, context):
        count("SayHellos", request, context)
        for _ in range(min(request.replies, 2) if request.replies > 100 else request.replies):
            yield reply("SayHellos", request.user.name)
        if request.replies > 100:
            context.abort(grpc.StatusCode.OUT_OF_RANGE, "at most 100 replies")

    def Gather(self, request_iterator, context):
        n = 0
        for request in request_iterator:
            count("Gather", request, context, first=n == 0)
            n += 1
        stream_ended(n)
        return reply("Gather", f"{n} hellos")

    def Chat(self, request_iterator, context):
        n = 0
        for request in request_iterator:
            count("Chat", request, context, first=n == 0)
            n += 1
            yield reply("Chat", request.user.name)
        stream_ended(n)


def answer_counts():
    for line in sys.stdin:
        if line.strip() == "count":
            with lock:
                doc = {
                    "calls": dict(calls),
                    "matched": state["matched"],
                    "metadata_matched": state["metadata_matched"],
                    "remaining_s": state["remaining"],
                    "messages": dict(messages),
                    "replied": dict(replied),
                    "per_call": {str(n): c for n, c in per_call.items()},
                }
            print(json.dumps(doc), flush=True)
        elif line.strip() == "requests":
            with lock:
                doc = list(recorded or [])
                if recorded is not None:
                    recorded.clear()
            print(json.dumps(doc), flush=True)


def main():
    global expected, recorded
    args = sys.argv[1:]
    port = int(args.pop(0))
    while args:
        flag, value = args.pop(0), args.pop(0)
        if flag == "--expect":
            expected = json_format.Parse(value, pb2.HelloRequest())
        elif flag == "--metadata":
            key, text = value.split("=", 1)
            metadata[key] = text.encode() if key.endswith("-bin") else text
        elif flag == "--record":
            recorded = [] if value == "yes" else None
        else:
            sys.exit(f"unknown option {flag}")
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=8),
        options=[("grpc.max_concurrent_streams", 1000)],
    )
    pb2_grpc.add_GreeterServicer_to_server(Greeter(), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    print(f"listening on {port}", flush=True)
    threading.Thread(target=answer_counts, daemon=True).start()
    server.wait_for_termination()


if __name__ == "__main__":
    main()

"""A server that forks a process per connection (PostgreSQL's model), speaking HTTP/1.1 with
keep-alive: each request burns about WORK_S of CPU in the connection's own process. For the
per-thread evidence of a process-per-connection server (tests/it/threads.rs).

    python3 forking_http.py PORT [WORK_S]
"""
import http.server
import socketserver
import sys
import time

WORK_S = float(sys.argv[2]) if len(sys.argv) > 2 else 0.001


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # One segment per answer: with Nagle, the body waits for the header's delayed ACK (40 ms).
    disable_nagle_algorithm = True

    def do_GET(self):
        # CPU time, not wall time: the work is the same on a busy machine.
        until = time.process_time() + WORK_S
        while time.process_time() < until:
            pass
        body = b"ok\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class Server(socketserver.ForkingMixIn, http.server.HTTPServer):
    allow_reuse_address = True


if __name__ == "__main__":
    with Server(("127.0.0.1", int(sys.argv[1])), Handler) as server:
        print("ready", flush=True)
        server.serve_forever()

#!/usr/bin/env python3
"""A delaying pipeline in front of a server: the limit is outside both processes.

    delay-proxy.py LISTEN_PORT UPSTREAM SLOTS DELAY_MS

Forwards each request read on 127.0.0.1:LISTEN_PORT to UPSTREAM (host:port, or the path of
a unix socket) and its response back, but every request first holds one of SLOTS places in
a pipeline for DELAY_MS, as a NIC queue or a remote daemon would: throughput stops at
SLOTS / DELAY_MS while nobody's CPU is busy, and latency grows as Little's law predicts.
One read is one request and one response (small HTTP messages on loopback).
"""
import socket
import sys
import threading
import time

port, upstream, slots, delay_s = (
    int(sys.argv[1]),
    sys.argv[2],
    threading.Semaphore(int(sys.argv[3])),
    float(sys.argv[4]) / 1000.0,
)


def connect():
    if ":" in upstream:
        host, up_port = upstream.rsplit(":", 1)
        return socket.create_connection((host, int(up_port)))
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(upstream)
    return s


def serve(client):
    try:
        up = connect()
    except OSError:
        client.close()
        return
    try:
        while True:
            request = client.recv(65536)
            if not request:
                return
            with slots:
                time.sleep(delay_s)
            up.sendall(request)
            response = up.recv(65536)
            if not response:
                return
            client.sendall(response)
    except OSError:
        return
    finally:
        client.close()
        up.close()


listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("127.0.0.1", port))
listener.listen(1024)
while True:
    conn, _ = listener.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    threading.Thread(target=serve, args=(conn,), daemon=True).start()

# The bench's second baseline: a bare ASGI "hello world" served by uvicorn.
#
# `python3 uvicorn_hello.py PORT WORKERS` runs WORKERS uvicorn processes, each with its own
# SO_REUSEPORT listening socket on 127.0.0.1:PORT (the kernel spreads connections over them).
# This stands in for `uvicorn --workers N`: that mode hands the socket to its children in a way
# that loses TCP_NODELAY, so every keep-alive request after the first waits ~40 ms for a delayed
# ACK (measured with uvicorn 0.54), which would make the baseline meaningless.
import os
import socket
import sys


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"text/plain"), (b"content-length", b"11")],
        }
    )
    await send({"type": "http.response.body", "body": b"hello world"})


def serve(port):
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(("127.0.0.1", port))
    config = uvicorn.Config(app, log_level="warning", access_log=False)
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    port, workers = int(sys.argv[1]), int(sys.argv[2])
    children = []
    for _ in range(workers - 1):
        pid = os.fork()
        if pid == 0:
            serve(port)
            os._exit(0)
        children.append(pid)
    try:
        serve(port)
    finally:
        for pid in children:
            try:
                os.kill(pid, 15)
                os.waitpid(pid, 0)
            except OSError:
                pass

"""Python worker for the kubeless-rs runtime proxy.

The proxy starts N of these. Each one loads MOD_NAME from the install volume,
connects to the unix socket named by KUBELESS_WORKER_SOCKET and answers one
framed call at a time: u32 header length, JSON header, u32 body length, body.
Function output (print, logging) goes to the process's stdout/stderr, which
the proxy passes through to the container log; frames never share them.
"""

import importlib
import json
import os
import signal
import socket
import struct
import sys
import threading
import traceback
from urllib.parse import parse_qs

_U32 = struct.Struct(">I")
_COALESCE = 64 * 1024
# The proxy sends header names in lower case: the worker's own lookups skip Headers' case
# folding (a Python-level call each).
_get = dict.get


class Headers(dict):
    """Lower-case header dict that also answers mixed-case lookups."""

    def __getitem__(self, key):
        return dict.__getitem__(self, key.lower())

    def get(self, key, default=None):
        return dict.get(self, key.lower(), default)

    def __contains__(self, key):
        return dict.__contains__(self, key.lower())


class Request:
    """What event['extensions']['request'] holds (bottle-like names)."""

    __slots__ = ("method", "path", "url", "query_string", "headers", "body", "remote_addr", "_query")

    def __init__(self, head, headers, body):
        self.method = head["method"]
        self.path = head["path"]
        self.url = head["url"]
        self.query_string = head["query"]
        self.headers = headers
        self.body = body
        self.remote_addr = head.get("remote_addr")
        self._query = None

    @property
    def query(self):
        """Query parameters: name -> last value."""
        if self._query is None:
            self._query = {k: v[-1] for k, v in parse_qs(self.query_string, keep_blank_values=True).items()}
        return self._query

    @property
    def json(self):
        return json.loads(self.body) if self.body else None

    def get_header(self, name, default=None):
        return self.headers.get(name, default)


def _is_json(ctype):
    if not ctype:
        return False
    media = ctype.split(";", 1)[0].strip().lower()
    return media == "application/json" or media.endswith("+json")


def _encode(value):
    """Body bytes and default content type for a return value."""
    if value is None:
        return b"", None
    if isinstance(value, str):
        return value.encode("utf-8"), "text/plain; charset=utf-8"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value), "application/octet-stream"
    if isinstance(value, (dict, list, int, float, bool)):
        return json.dumps(value).encode("utf-8"), "application/json"
    return str(value).encode("utf-8"), "text/plain; charset=utf-8"


def _to_response(result, response_cls):
    status = 200
    headers = {}
    body = result
    if response_cls is not None and isinstance(result, response_cls):
        status, headers, body = result.status, result.headers, result.body
    elif isinstance(result, tuple) and 2 <= len(result) <= 3 and isinstance(result[1], int):
        # Flask-style (body, status) or (body, status, headers).
        body, status = result[0], result[1]
        if len(result) == 3 and result[2]:
            headers = result[2]
    data, ctype = _encode(body)
    out = [(str(k), str(v)) for k, v in dict(headers).items()]
    if ctype and not any(k.lower() == "content-type" for k, _ in out):
        out.append(("content-type", ctype))
    return {"status": int(status), "headers": out}, data


class Channel:
    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)
        self.rfile = self.sock.makefile("rb", buffering=65536)

    def read(self):
        raw = self.rfile.read(4)
        if len(raw) < 4:
            return None, None
        (hlen,) = _U32.unpack(raw)
        head = json.loads(self.rfile.read(hlen))
        (blen,) = _U32.unpack(self.rfile.read(4))
        body = self.rfile.read(blen) if blen else b""
        if len(body) != blen:
            return None, None
        return head, body

    def write(self, head, body=b""):
        h = json.dumps(head, separators=(",", ":")).encode("utf-8")
        prefix = b"".join((_U32.pack(len(h)), h, _U32.pack(len(body))))
        if len(body) <= _COALESCE:
            self.sock.sendall(prefix + body)
        else:
            self.sock.sendall(prefix)
            self.sock.sendall(body)


def _setup_path(volume):
    packages = os.environ.get("KUBELESS_PYTHON_PACKAGES") or os.path.join(volume, ".python-packages")
    # Kubeless's `pip install --prefix` layout, so volumes prepared that way still work.
    legacy = os.path.join(
        volume, "lib", "python%d.%d" % sys.version_info[:2], "site-packages"
    )
    for p in reversed([volume, packages, legacy]):
        if p not in sys.path:
            sys.path.insert(0, p)


def _headers(pairs):
    """The call's headers; a repeated header's values joined with ", "."""
    headers = Headers(pairs)
    if len(headers) != len(pairs):
        headers = Headers()
        for k, v in pairs:
            prev = _get(headers, k)
            dict.__setitem__(headers, k, v if prev is None else prev + ", " + v)
    return headers


def _call_context(context, headers):
    """The context, plus the call's W3C trace context when it has one."""
    tp = _get(headers, "traceparent")
    if tp is None:
        return context
    ctx = dict(context, traceparent=tp)
    ts = _get(headers, "tracestate")
    if ts is not None:
        ctx["tracestate"] = ts
    return ctx


class BackgroundError(Exception):
    """A thread the function started raised while the function was still running."""


class _CallGuard:
    """Turns an exception in a function's thread into a 500 for the call in flight.

    Without this, a handler that waits for a thread that died would hang until the timeout.
    The thread's hook sends SIGINT to the main thread; the signal handler runs in the
    main thread, so it sees exactly whether a call is in flight and raises only then.
    Outside a call the exception is only logged: the interpreter's state is still sound.
    """

    def __init__(self):
        self.in_call = False
        self.pending = None

    def install(self):
        threading.excepthook = self._thread_hook
        signal.signal(signal.SIGINT, self._on_interrupt)

    def _thread_hook(self, args):
        name = args.thread.name if args.thread is not None else "?"
        print("exception in thread %s:" % name, file=sys.stderr)
        traceback.print_exception(args.exc_type, args.exc_value, args.exc_traceback)
        sys.stderr.flush()
        if self.in_call and args.exc_type is not SystemExit:
            self.pending = "exception in thread %s: %s: %s" % (name, args.exc_type.__name__, args.exc_value)
            # A real signal to the main thread, so a blocking wait there (lock, sleep, select)
            # wakes up too; _thread.interrupt_main() would only be seen once the wait ends.
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

    def _on_interrupt(self, signum, frame):
        if self.in_call and self.pending is not None:
            msg, self.pending = self.pending, None
            raise BackgroundError(msg)


def _await_function():
    """Warm pool standby: started before its function, the worker reads its environment (one
    JSON line) from stdin. Returns False when stdin closes without one."""
    line = sys.stdin.buffer.readline()
    if not line.strip():
        return False
    os.environ.update(json.loads(line))
    del os.environ["KUBELESS_WORKER_STANDBY"]
    return True


def _one_write_per_line():
    """Function output reaches the shared container log one whole line per write.

    PYTHONUNBUFFERED (which the proxy sets, so nothing is lost when a worker dies) makes print()
    write each argument, separator and newline on its own, and the workers share one stdout: two
    workers' pieces interleaved into one line. Line buffering keeps a line's pieces together and
    still writes each line as soon as it ends."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(line_buffering=True, write_through=False)
        except (AttributeError, ValueError):
            pass


def main():
    _one_write_per_line()
    if os.environ.get("KUBELESS_WORKER_STANDBY") and not _await_function():
        return 0
    sock_path = os.environ.get("KUBELESS_WORKER_SOCKET")
    if not sock_path:
        print("kubeless worker: KUBELESS_WORKER_SOCKET is not set", file=sys.stderr)
        return 2
    volume = os.environ.get("KUBELESS_INSTALL_VOLUME") or os.getcwd()
    mod_name = os.environ.get("MOD_NAME", "")
    func_name = os.environ.get("FUNC_HANDLER", "")
    _setup_path(volume)
    chan = Channel(sock_path)

    try:
        from kubeless import Response as response_cls
    except ImportError:
        response_cls = None
    try:
        module = importlib.import_module(mod_name)
        func = getattr(module, func_name)
        if not callable(func):
            raise TypeError("%s.%s is not callable" % (mod_name, func_name))
    except BaseException as e:  # report any load failure, even SystemExit
        traceback.print_exc()
        chan.write({"ready": False, "error": "cannot load %s.%s: %s: %s" % (mod_name, func_name, type(e).__name__, e)})
        return 1
    chan.write({"ready": True, "pid": os.getpid()})

    context = {
        "function-name": func_name,
        "timeout": os.environ.get("FUNC_TIMEOUT", ""),
        "runtime": os.environ.get("FUNC_RUNTIME", ""),
        "memory-limit": os.environ.get("FUNC_MEMORY_LIMIT", ""),
    }
    loop = None
    guard = _CallGuard()
    guard.install()
    while True:
        head, body = chan.read()
        if head is None:
            return 0
        headers = _headers(head["headers"])
        data = body
        if _is_json(_get(headers, "content-type")):
            try:
                data = json.loads(body) if body else None
            except ValueError:
                data = body
        event = {
            "data": data,
            "event-id": _get(headers, "event-id"),
            "event-type": _get(headers, "event-type"),
            "event-time": _get(headers, "event-time"),
            "event-namespace": _get(headers, "event-namespace"),
            "extensions": {"request": Request(head, headers, body)},
        }
        try:
            guard.pending = None
            guard.in_call = True
            try:
                result = func(event, _call_context(context, headers))
                if hasattr(result, "__await__"):
                    if loop is None:
                        # Imported on first use: asyncio adds about 7 MB to every idle worker.
                        import asyncio

                        loop = asyncio.new_event_loop()
                        asyncio.set_event_loop(loop)
                    result = loop.run_until_complete(result)
            finally:
                guard.in_call = False
                guard.pending = None
            rhead, rbody = _to_response(result, response_cls)
        except Exception as e:
            traceback.print_exc()
            sys.stderr.flush()
            rhead = {
                "status": 500,
                "headers": [("content-type", "text/plain; charset=utf-8")],
                "error": "%s: %s" % (type(e).__name__, e),
            }
            rbody = b"Internal Server Error\n"
        chan.write(rhead, rbody)


if __name__ == "__main__":
    sys.exit(main())

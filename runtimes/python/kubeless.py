"""Helpers for Kubeless functions running on the kubeless-rs Python runtime.

    from kubeless import Response

    def handler(event, context):
        return Response({"created": True}, status=201, headers={"Location": "/items/1"})

The body follows the same rules as a plain return value: str -> text/plain,
dict/list -> application/json, bytes -> application/octet-stream, unless the
headers already name a Content-Type.
"""


class Response:
    """An HTTP answer with a status code and headers."""

    __slots__ = ("body", "status", "headers")

    def __init__(self, body=None, status=200, headers=None):
        self.body = body
        self.status = int(status)
        self.headers = dict(headers or {})

    def __repr__(self):
        return "Response(status=%d, headers=%r)" % (self.status, self.headers)

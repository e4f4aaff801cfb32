# runtime: python3.11
def handler(event, context):
    """Answers with a greeting and echoes the event's data back."""
    data = event["data"]
    # A GET or a plain-text body arrives as bytes, which JSON cannot carry: send it as text.
    if isinstance(data, bytes):
        data = data.decode("utf-8", errors="replace")
    return {"hello": "from python", "data": data, "function": context["function-name"]}

def handler(event, context):
    """Answers with a greeting and echoes the event's data back."""
    return {"hello": "from python", "data": event["data"], "function": context["function-name"]}

"""Drives the gateway's /v1/chat/completions with the official openai SDK; prints one JSON
object. Usage: openai_cases.py CASE [MODEL]. GATEWAY_URL and GATEWAY_TOKEN name the daemon."""
import json
import os
import sys

import openai

client = openai.OpenAI(
    base_url=os.environ["GATEWAY_URL"] + "/v1",
    api_key=os.environ["GATEWAY_TOKEN"],
    max_retries=0,
)
case = sys.argv[1]
model = sys.argv[2] if len(sys.argv) > 2 else "mock/mock:tokens=3"
headers = {}
if os.environ.get("GATEWAY_PROJECT"):
    headers["x-elfgate-project-path"] = os.environ["GATEWAY_PROJECT"]
out = {}


def error_of(fn):
    try:
        fn()
    except openai.APIStatusError as e:
        return {"class": type(e).__name__, "status": e.status_code, "body": e.body}
    return None


if case == "complete":
    raw = client.chat.completions.with_raw_response.create(
        model=model,
        messages=[{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"}],
        temperature=0.5,
        max_completion_tokens=50,
        extra_headers=headers,
    )
    c = raw.parse()
    out = {
        "session": raw.headers.get("x-elfgate-session-id"),
        "text": c.choices[0].message.content,
        "finish": c.choices[0].finish_reason,
        "usage": c.usage.model_dump(),
    }
elif case == "stream":
    raw = client.chat.completions.with_raw_response.create(
        model=model,
        messages=[{"role": "user", "content": "hello"}],
        stream=True,
        stream_options={"include_usage": True},
        extra_headers=headers,
    )
    text, usage, finish = "", None, None
    for chunk in raw.parse():
        if chunk.usage is not None:
            usage = chunk.usage.model_dump()
        for choice in chunk.choices:
            text += choice.delta.content or ""
            finish = choice.finish_reason or finish
    out = {"session": raw.headers.get("x-elfgate-session-id"), "text": text, "usage": usage,
           "finish": finish}
elif case == "stream_error":
    text, error = "", None
    try:
        for chunk in client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": "hello"}], stream=True):
            for choice in chunk.choices:
                text += choice.delta.content or ""
    except openai.APIError as e:
        error = {"class": type(e).__name__, "message": e.message}
    out = {"text": text, "error": error}
elif case == "tools":
    tools = [{"type": "function", "function": {
        "name": "lookup", "description": "looks things up",
        "parameters": {"type": "object", "properties": {}}}}]
    messages = [{"role": "user", "content": "find it"}]
    first = client.chat.completions.create(model=model, messages=messages, tools=tools,
                                           tool_choice="auto")
    call = first.choices[0].message.tool_calls[0]
    messages.append(first.choices[0].message.model_dump(exclude_none=True))
    messages.append({"role": "tool", "tool_call_id": call.id, "content": "it is here"})
    second = client.chat.completions.create(model=sys.argv[3], messages=messages, tools=tools)
    out = {"finish": first.choices[0].finish_reason, "tool": call.function.name,
           "call_id": call.id, "answer": second.choices[0].message.content}
elif case == "errors":
    msgs = [{"role": "user", "content": "hi"}]
    out = {
        "unknown_model": error_of(
            lambda: client.chat.completions.create(model="nope/x", messages=msgs)),
        "missing_model": error_of(
            lambda: client.post("/chat/completions", body={"messages": msgs}, cast_to=object)),
        "wrong_type": error_of(lambda: client.chat.completions.create(
            model="mock/mock", messages=msgs, extra_body={"temperature": "hot"})),
        "n2": error_of(lambda: client.chat.completions.create(
            model="mock/mock", messages=msgs, n=2)),
        "models": [m.id for m in client.models.list()],
    }
print(json.dumps(out))

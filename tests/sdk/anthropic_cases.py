"""Drives the gateway's /v1/messages with the official anthropic SDK; prints one JSON object.
Usage: anthropic_cases.py CASE MODEL [MODEL2]. GATEWAY_URL and GATEWAY_TOKEN name the daemon."""
import json
import os
import sys

import anthropic

headers = {}
if os.environ.get("GATEWAY_PROJECT"):
    headers["x-elfgate-project-path"] = os.environ["GATEWAY_PROJECT"]
client = anthropic.Anthropic(
    base_url=os.environ["GATEWAY_URL"],
    api_key=None,
    auth_token=os.environ["GATEWAY_TOKEN"],
    max_retries=0,
    default_headers=headers,
)
case = sys.argv[1]
model = sys.argv[2] if len(sys.argv) > 2 else "mock-anthropic/mock:tokens=3"
out = {}


def error_of(fn):
    try:
        fn()
    except anthropic.APIStatusError as e:
        return {"class": type(e).__name__, "status": e.status_code, "body": e.body}
    return None


if case == "text":
    raw = client.messages.with_raw_response.create(
        model=model, max_tokens=100, system=[{"type": "text", "text": "be brief",
                                               "cache_control": {"type": "ephemeral"}}],
        messages=[{"role": "user", "content": "hello"}])
    m = raw.parse()
    out = {"session": raw.headers.get("x-elfgate-session-id"),
           "text": "".join(b.text for b in m.content if b.type == "text"),
           "stop": m.stop_reason, "usage": m.usage.model_dump()}
elif case == "stream":
    with client.messages.stream(
        model=model, max_tokens=100, messages=[{"role": "user", "content": "hello"}],
        thinking={"type": "enabled", "budget_tokens": 1024},
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    out = {"text": text, "types": [b.type for b in final.content],
           "thinking": "".join(b.thinking for b in final.content if b.type == "thinking"),
           "signatures": [b.signature for b in final.content if b.type == "thinking"],
           "stop": final.stop_reason, "usage": final.usage.model_dump()}
elif case == "stop_sequence":
    msgs = [{"role": "user", "content": "count"}]
    m = client.messages.create(model=model, max_tokens=100, messages=msgs,
                               stop_sequences=["tok2"])
    with client.messages.stream(model=model, max_tokens=100, messages=msgs,
                                stop_sequences=["tok2"]) as stream:
        final = stream.get_final_message()
    out = {"stop": m.stop_reason, "sequence": m.stop_sequence,
           "text": "".join(b.text for b in m.content if b.type == "text"),
           "stream_stop": final.stop_reason, "stream_sequence": final.stop_sequence,
           "stream_text": "".join(b.text for b in final.content if b.type == "text")}
elif case == "tools":
    tools = [{"name": "lookup", "description": "looks things up",
              "input_schema": {"type": "object", "properties": {}}}]
    messages = [{"role": "user", "content": "find it"}]
    first = client.messages.create(model=model, max_tokens=100, messages=messages, tools=tools)
    call = next(b for b in first.content if b.type == "tool_use")
    messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True)
                                                       for b in first.content]})
    messages.append({"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": call.id, "content": "it is here"}]})
    second = client.messages.create(model=sys.argv[3], max_tokens=100, messages=messages,
                                    tools=tools)
    out = {"stop": first.stop_reason, "tool": call.name, "call_id": call.id,
           "answer": "".join(b.text for b in second.content if b.type == "text")}
elif case == "errors":
    msgs = [{"role": "user", "content": "hi"}]
    out = {
        "unknown_model": error_of(
            lambda: client.messages.create(model="nope/x", max_tokens=10, messages=msgs)),
        "missing_model": error_of(
            lambda: client.post("/v1/messages", body={"messages": msgs, "max_tokens": 10},
                                cast_to=object)),
        "wrong_type": error_of(lambda: client.messages.create(
            model=model, max_tokens=10, messages=msgs, extra_body={"stream": "yes"})),
    }
print(json.dumps(out))

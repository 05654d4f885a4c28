"""Drives the gateway's /v1/responses with the official openai SDK; prints one JSON object.
Usage: openai_responses_cases.py CASE [MODEL]. GATEWAY_URL and GATEWAY_TOKEN name the daemon."""
import json
import sys
import os

import openai

client = openai.OpenAI(
    base_url=os.environ["GATEWAY_URL"] + "/v1",
    api_key=os.environ["GATEWAY_TOKEN"],
    max_retries=0,
)
case = sys.argv[1]
model = sys.argv[2] if len(sys.argv) > 2 else "mock/mock:tokens=3"
out = {}


def error_of(fn):
    try:
        fn()
    except openai.APIStatusError as e:
        return {"class": type(e).__name__, "status": e.status_code, "body": e.body}
    return None


def left_out(fn):
    raw = fn()
    return {"omitted": raw.headers.get("x-elfgate-omitted-tools"), "text": raw.parse().output_text}


if case == "create":
    raw = client.responses.with_raw_response.create(
        model=model, instructions="be brief", input="hello", max_output_tokens=50)
    r = raw.parse()
    out = {"session": raw.headers.get("x-elfgate-session-id"), "id": r.id, "status": r.status,
           "text": r.output_text, "usage": r.usage.model_dump(),
           "output_types": [i.type for i in r.output]}
elif case == "stream":
    types, text, final = [], "", None
    with client.responses.stream(model=model, input=[
            {"role": "user", "content": [{"type": "input_text", "text": "hello"}]}]) as stream:
        for event in stream:
            types.append(event.type)
            if event.type == "response.output_text.delta":
                text += event.delta
        final = stream.get_final_response()
    out = {"types": types, "text": text, "final_text": final.output_text,
           "status": final.status, "usage": final.usage.model_dump()}
elif case == "tools":
    tools = [{"type": "function", "name": "lookup", "description": "looks things up",
              "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}]
    first = client.responses.create(model=model, input="find it", tools=tools)
    calls = [i for i in first.output if i.type == "function_call"]
    call = calls[0]
    second = client.responses.create(
        model=model, previous_response_id=first.id, tools=tools,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "42"}])
    out = {"call": {"name": call.name, "arguments": json.loads(call.arguments),
                    "call_id": call.call_id},
           "first_id": first.id, "text": second.output_text, "second_id": second.id,
           "previous": second.previous_response_id}
elif case == "store_false":
    first = client.responses.create(model=model, input="forget me", store=False)
    out = {"text": first.output_text,
           "later": error_of(lambda: client.responses.create(
               model=model, input="again", previous_response_id=first.id))}
elif case == "errors":
    out = {
        "unknown_model": error_of(lambda: client.responses.create(model="nope/x", input="hi")),
        "bad_input": error_of(lambda: client.responses.create(model=model, input=42)),
        # Not an error: a built-in tool the route cannot serve is left out, with a notice.
        "builtin": left_out(lambda: client.responses.with_raw_response.create(
            model=model, input="hi", tools=[{"type": "file_search", "vector_store_ids": ["v"]}])),
        "upstream_429": error_of(lambda: client.responses.create(
            model="mock/mock:fail=429", input="hi")),
        "upstream_500": error_of(lambda: client.responses.create(
            model="mock/mock:fail=500", input="hi")),
    }
print(json.dumps(out))

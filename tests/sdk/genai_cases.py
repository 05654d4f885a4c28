"""Drives the gateway's Gemini door (/v1beta) with the official google-genai SDK; prints one JSON
object. Usage: genai_cases.py CASE [MODEL]. GATEWAY_URL and GATEWAY_TOKEN name the daemon."""
import json
import os
import sys

from google import genai
from google.genai import errors, types

client = genai.Client(
    api_key=os.environ["GATEWAY_TOKEN"],
    http_options=types.HttpOptions(base_url=os.environ["GATEWAY_URL"],
                                   retry_options=types.HttpRetryOptions(attempts=1)),
)
case = sys.argv[1]
model = sys.argv[2] if len(sys.argv) > 2 else "mock/mock:tokens=3"
out = {}


def error_of(fn):
    try:
        fn()
    except errors.APIError as e:
        return {"class": type(e).__name__, "code": e.code, "status": e.status,
                "message": e.message}
    return None


if case == "generate":
    r = client.models.generate_content(
        model=model, contents="hello",
        config=types.GenerateContentConfig(system_instruction="be brief", max_output_tokens=50))
    out = {"text": r.text, "finish": r.candidates[0].finish_reason.value,
           "usage": r.usage_metadata.model_dump(exclude_none=True),
           "session": r.sdk_http_response.headers.get("x-elfgate-session-id")}
elif case == "stream":
    text, finish = "", None
    for chunk in client.models.generate_content_stream(model=model, contents="hello"):
        text += chunk.text or ""
        if chunk.candidates and chunk.candidates[0].finish_reason:
            finish = chunk.candidates[0].finish_reason.value
    out = {"text": text, "finish": finish}
elif case == "tools":
    lookup = types.FunctionDeclaration(
        name="lookup", description="looks things up",
        parameters_json_schema={"type": "object", "properties": {"q": {"type": "string"}}})
    config = types.GenerateContentConfig(
        tools=[types.Tool(function_declarations=[lookup])],
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True))
    contents = [types.Content(role="user", parts=[types.Part(text="find it")])]
    first = client.models.generate_content(model=model, contents=contents, config=config)
    call = first.function_calls[0]
    contents.append(first.candidates[0].content)
    contents.append(types.Content(role="user", parts=[
        types.Part.from_function_response(name=call.name, response={"output": "42"})]))
    second = client.models.generate_content(model=model, contents=contents, config=config)
    out = {"call": {"name": call.name, "args": call.args}, "text": second.text}
elif case == "count":
    r = client.models.count_tokens(model=model, contents="twelve chars")
    out = {"total": r.total_tokens}
elif case == "models":
    out = {"names": [m.name for m in client.models.list()]}
elif case == "errors":
    out = {
        "unknown_model": error_of(lambda: client.models.generate_content(
            model="nope/x", contents="hi")),
        "upstream_429": error_of(lambda: client.models.generate_content(
            model="mock/mock:fail=429", contents="hi")),
        "upstream_500": error_of(lambda: client.models.generate_content(
            model="mock/mock:fail=500", contents="hi")),
    }
elif case == "bad_key":
    bad = genai.Client(api_key="wrong", http_options=types.HttpOptions(
        base_url=os.environ["GATEWAY_URL"], retry_options=types.HttpRetryOptions(attempts=1)))
    out = {"error": error_of(lambda: bad.models.generate_content(model=model, contents="hi"))}
print(json.dumps(out))

#!/usr/bin/env python3
"""A client of coli serve's OpenAI-compatible API written the way client
libraries speak it (Bearer key, JSON bodies, server-sent events), with
Python's own http.client: Debian 12 packages no OpenAI client library.

usage: openai_client.py PORT API_KEY
Checks that a chat completion streamed and not streamed give the same text
at temperature 0, that the stream's events are well formed and end with
[DONE], that usage counts add up, and that errors come as OpenAI's error
object. Exits 0 when all hold, 1 with the failures printed."""
import http.client
import json
import sys

port, key = int(sys.argv[1]), sys.argv[2]
failures = []


def request(method, path, body=None, headers=None):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    all_headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    all_headers.update(headers or {})
    connection.request(method, path, body=None if body is None else json.dumps(body), headers=all_headers)
    response = connection.getresponse()
    return response.status, response.getheader("Content-Type", ""), response.read().decode("utf-8")


def expect(condition, what):
    if not condition:
        failures.append(what)


chat = {"model": "demo", "messages": [{"role": "system", "content": "You are terse."},
                                      {"role": "user", "content": "Name a colour."}],
        "max_tokens": 12, "temperature": 0}
status, kind, text = request("POST", "/v1/chat/completions", chat)
expect(status == 200 and kind.startswith("application/json"), f"chat: {status} {kind}")
whole = json.loads(text)
content = whole["choices"][0]["message"]["content"]
expect(whole["object"] == "chat.completion", "chat: object")
expect(whole["usage"]["completion_tokens"] <= 12, "chat: usage")
expect(whole["usage"]["total_tokens"] == whole["usage"]["prompt_tokens"] + whole["usage"]["completion_tokens"], "chat: total")

status, kind, text = request("POST", "/v1/chat/completions", dict(chat, stream=True, stream_options={"include_usage": True}))
expect(status == 200 and kind.startswith("text/event-stream"), f"stream: {status} {kind}")
events = [line[len("data: "):] for line in text.split("\n\n") if line.startswith("data: ")]
expect(events and events[-1] == "[DONE]", "stream: ends with [DONE]")
chunks = [json.loads(e) for e in events[:-1]]
expect(chunks[0]["choices"][0]["delta"].get("role") == "assistant", "stream: the first chunk carries the role")
streamed = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
expect(streamed == content, f"stream: {streamed!r} != {content!r}")
finish = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
expect(finish == [whole["choices"][0]["finish_reason"]], f"stream: finish reasons {finish}")
expect(chunks[-1].get("usage", {}).get("completion_tokens") == whole["usage"]["completion_tokens"], "stream: usage chunk")
expect(len({c["id"] for c in chunks}) == 1, "stream: one id")

status, _, text = request("POST", "/v1/chat/completions", {"messages": "hello"})
error = json.loads(text).get("error", {})
expect(status == 400 and error.get("param") == "messages" and error.get("message"), f"bad messages: {status} {text}")
status, _, text = request("GET", "/v1/models", headers={"Authorization": "Bearer wrong"})
expect(status == 401 and json.loads(text)["error"]["code"] == "invalid_api_key", f"wrong key: {status} {text}")

for failure in failures:
    print("FAIL:", failure)
print(f"openai_client: {'ok' if not failures else 'failed'} ({content!r})")
sys.exit(1 if failures else 0)

#!/usr/bin/env bash
# coli serve on a free loopback port, driven by real clients: curl, and a
# Python client of the OpenAI protocol (openai_client.py; Debian 12 packages
# no OpenAI client library). Streaming and not, the same greedy text as
# coli run, stop strings, a 4xx with a message for a malformed body, an
# unknown model and an over-long prompt (the server serving on after each),
# the API key, a client that goes away (its generation stops), two requests
# at once (one waits), /metrics, SIGTERM. Usage: coli_serve_cli_test.sh COLI FIXTURES
set -uo pipefail
coli="$1"
fixtures="$2"
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/check.sh"

"$coli" convert --model "$fixtures/models/tiny-demo" --out "$work/demo.coli" \
  --tokenizer "$fixtures/tokenizer/ggml-vocab-gpt-2.gguf" >/dev/null 2>&1
# The reference: coli run's greedy text for the same prompt.
"$coli" run --model "$work/demo.coli" --prompt "Hello world" --max-tokens 8 --threads 1 >"$work/run.txt" 2>/dev/null
reference=$(head -c -1 "$work/run.txt")  # without the newline coli run ends with

pid=""
port=""
start_server() {  # start_server LOG ARGS...: sets pid and port
  local log="$1"
  shift
  "$coli" serve --model "$work/demo.coli" --port 0 "$@" >/dev/null 2>"$log" &
  pid=$!
  port=""
  for _ in $(seq 1 600); do
    port=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$log" | sed 's/.*://')
    [[ -n "$port" ]] && return 0
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}
key=secret-key
auth=(-H "Authorization: Bearer $key")
post() {  # post PATH BODY OUT: prints the status
  curl -s -o "$3" -w '%{http_code}' "${auth[@]}" -H 'Content-Type: application/json' "http://127.0.0.1:$port$1" -d "$2"
}
json_field() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"; }
healthy() { [[ $(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health") == 200 ]]; }

check "the server starts and prints its port" start_server "$work/a.log" --threads 1 --chat-template chatml --ctx 4096 --api-key "$key"
check "it listens on loopback only by default" grep -q 'http://127.0.0.1:' "$work/a.log"
check "/health needs no key" healthy
check "/v1/models needs the key" test "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/v1/models")" = 401
curl -s "${auth[@]}" "http://127.0.0.1:$port/v1/models" >"$work/models.json"
check "/v1/models lists the model by its file name" test "$(json_field "$work/models.json" 'd["data"][0]["id"]')" = demo

# Not streaming: the text coli run prints for the same prompt (greedy).
check "completion: 200" test "$(post /v1/completions '{"model":"demo","prompt":"Hello world","max_tokens":8,"temperature":0}' "$work/c.json")" = 200
check "completion: coli run's text" test "$(json_field "$work/c.json" 'd["choices"][0]["text"]')" = "$reference"
check "completion: finish_reason length" test "$(json_field "$work/c.json" 'd["choices"][0]["finish_reason"]')" = length
check "completion: usage" test "$(json_field "$work/c.json" 'd["usage"]["completion_tokens"]')" = 8
# Streaming: server-sent events whose texts add up to the same.
curl -sN "${auth[@]}" "http://127.0.0.1:$port/v1/completions" \
  -d '{"prompt":"Hello world","max_tokens":8,"temperature":0,"stream":true}' >"$work/s.txt"
check "stream: ends with [DONE]" test "$(tail -n 2 "$work/s.txt" | head -n 1)" = "data: [DONE]"
streamed=$(python3 -c '
import json, sys
events = [l[6:] for l in open(sys.argv[1]).read().split("\n\n") if l.startswith("data: ") and l != "data: [DONE]"]
sys.stdout.write("".join(json.loads(e)["choices"][0]["text"] for e in events))' "$work/s.txt")
check "stream: the same text" test "$streamed" = "$reference"
# A stop string: the text ends before it.
post /v1/completions '{"prompt":"Hello world","max_tokens":8,"temperature":0,"stop":["d w"]}' "$work/stop.json" >/dev/null
check "stop string: the text before it" test "$(json_field "$work/stop.json" 'd["choices"][0]["text"]')" = "${reference%%d w*}"
check "stop string: finish_reason stop" test "$(json_field "$work/stop.json" 'd["choices"][0]["finish_reason"]')" = stop
# Chat, through a client of the OpenAI protocol.
check "python OpenAI-protocol client: chat streamed and not" python3 "$here/openai_client.py" "$port" "$key"

# Mistakes: a 4xx with a message each, and the server serves on.
check "malformed JSON: 400" test "$(post /v1/chat/completions '{"messages": [' "$work/e1.json")" = 400
check "malformed JSON: says so" contains "$work/e1.json" 'not valid JSON'
check "serving after a malformed body" healthy
check "unknown model: 404" test "$(post /v1/completions '{"model":"gpt-4","prompt":"x"}' "$work/e2.json")" = 404
check "unknown model: names both" contains "$work/e2.json" "the model 'gpt-4' is not served here; this server serves 'demo'"
long=$(python3 -c 'print("word " * 5000)')
check "over-long prompt: 400" test "$(post /v1/completions "{\"prompt\":\"$long\"}" "$work/e3.json")" = 400
check "over-long prompt: the numbers" grep -Eq 'the prompt is 500[0-9] tokens and the context holds 4096' "$work/e3.json"
check "over-long prompt: context_length_exceeded" contains "$work/e3.json" context_length_exceeded
check "unknown path: 404 with a message" test "$(post /v1/embeddings '{}' "$work/e4.json")" = 404
check "still answering after the errors" test "$(post /v1/completions '{"prompt":"Hello world","max_tokens":2,"temperature":0}' "$work/c2.json")" = 200

# A client that goes away: its generation stops (the counter says so) and the next request is answered.
curl -sN -m 0.5 "${auth[@]}" "http://127.0.0.1:$port/v1/completions" -d '{"prompt":"Hi","max_tokens":100000,"stream":true}' >/dev/null
curl -s -m 0.5 "${auth[@]}" "http://127.0.0.1:$port/v1/completions" -d '{"prompt":"Hi","max_tokens":100000}' >/dev/null
check "after the clients left: answered" test "$(post /v1/completions '{"prompt":"Hello world","max_tokens":2}' "$work/c3.json")" = 200
curl -s "${auth[@]}" "http://127.0.0.1:$port/metrics" >"$work/metrics.txt"
check "metrics: both departures counted" grep -q '^coli_requests_cancelled_total 2$' "$work/metrics.txt"
check "metrics: the rejected requests" grep -q '^coli_requests_rejected_total [5-9]' "$work/metrics.txt"
check "metrics: hit rate" grep -q '^coli_expert_hit_rate ' "$work/metrics.txt"
check "metrics: memory" grep -q '^coli_resident_bytes [1-9]' "$work/metrics.txt"
# Two at once: one waits, both are answered.
post /v1/completions '{"prompt":"One","max_tokens":50}' "$work/q1.json" >"$work/q1.code" &
first=$!
post /v1/completions '{"prompt":"Two","max_tokens":50}' "$work/q2.json" >"$work/q2.code" &
wait "$first" "$!"
check "two requests at once: both answered" test "$(cat "$work/q1.code" "$work/q2.code")" = 200200
check "SIGTERM stops it" kill -TERM "$pid"
wait "$pid"
check "exit 0 after SIGTERM" test $? -eq 0
check "says it stopped" contains "$work/a.log" 'coli serve: stopped'

# Planned from a profile: /metrics puts the resident set next to the plan. Without a recognised
# chat template, chat requests say what to do; a taken port is an error.
"$(dirname "$coli")/coli-probe" --quick --out "$work/profile.toml" >/dev/null 2>&1
check "a server planned from a profile, without a chat format, starts" start_server "$work/b.log" --profile "$work/profile.toml"
check "it says where its knobs came from" contains "$work/b.log" "coli serve: knobs from profile"
check "it warns about chat" contains "$work/b.log" 'chat/completions will answer 400'
auth=()
check "chat without a format: 400" test "$(post /v1/chat/completions '{"messages":[{"role":"user","content":"x"}]}' "$work/e5.json")" = 400
check "chat without a format: names --chat-template" contains "$work/e5.json" 'chat-template'
"$coli" serve --model "$work/demo.coli" --port "$port" --threads 1 >/dev/null 2>"$work/taken.log"
check "a taken port: exit 1" test $? -eq 1
curl -s "http://127.0.0.1:$port/v1/completions" -d '{"prompt":"Hello world","max_tokens":4}' >/dev/null
curl -s "http://127.0.0.1:$port/metrics" >"$work/metrics2.txt"
check "metrics: the planned RAM" grep -q '^coli_planned_ram_bytes [1-9]' "$work/metrics2.txt"
check "metrics: the resident set within the plan plus its margin" python3 -c '
import sys
m = dict(l.split() for l in open(sys.argv[1]) if l.startswith("coli_"))
sys.exit(0 if float(m["coli_peak_resident_bytes"]) <= float(m["coli_planned_ram_bytes"]) + float(m["coli_planned_ram_margin_bytes"]) else 1)' "$work/metrics2.txt"
check "a taken port: says so" contains "$work/taken.log" "cannot listen on 127.0.0.1:$port"
kill -TERM "$pid"
wait "$pid"
finish

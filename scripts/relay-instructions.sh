#!/usr/bin/env bash
# Counts the instructions the daemon executes to relay a fixed workload, under valgrind's
# callgrind: a repeatable figure where CPU time on a shared machine is not. See
# docs/benchmarks.md ("Instructions per relayed token").
#
#   scripts/relay-instructions.sh [SESSIONS] [TOKENS] [DELAY_MS] [CONCURRENCY]   [20 200 0 4]
#
# Starts elfgate-mockllm and the daemon (release builds in target/release; build them with
# `cargo build --release -p elfgate-server -p elfgate-mockllm`, add
# CARGO_PROFILE_RELEASE_DEBUG=line-tables-only for readable profiles), runs CONCURRENCY warm-up
# sessions of the same kind (so that lazily built state, such as prepared statements, is built),
# then counts only while SESSIONS `api` sessions of TOKENS tokens (DELAY_MS before each) run,
# CONCURRENCY at a time, each as `POST /v1/sessions` then `GET …/events?until=complete`.
# Prints instructions in total, per session and per relayed token, and the number of
# `streamDelta` events logged; the profile stays in the printed directory for
# `callgrind_annotate`. KEEP=1 keeps the directory when done (it is removed otherwise, except the
# profile, which is copied to ./callgrind.relay.out). GATEWAY=1 sends each session through the
# gateway's front door instead: `POST /v1/chat/completions` (streamed, model `mock/…`) read to
# `data: [DONE]`. EXTRA_CONFIG=FILE appends FILE to the daemon's configuration, right after the mock
# provider's table: keys before its first table header are the provider's (its prices), its
# tables the daemon's (`[[budgets]]`, `[telemetry]`, ...).
set -euo pipefail
cd "$(dirname "$0")/.."

sessions=${1:-20}
tokens=${2:-200}
delay_ms=${3:-0}
concurrency=${4:-4}
# MODE=perf: the daemon runs natively and `perf stat` counts its syscalls, context switches and
# CPU time during the workload instead (MODE=strace: a count of each syscall; MODE=record: a
# `perf record` CPU profile of the daemon, kernel included, into PERF_DATA) (syscalls are kernel work that callgrind does not see).
mode=${MODE:-callgrind}
bin=target/release
daemon=${DAEMON:-$bin/elfgate}

for b in elfgate elfgate-mockllm; do
    [[ -x $bin/$b ]] || { echo "relay-instructions: $bin/$b missing (build it in release)" >&2; exit 1; }
done
tool=valgrind
[[ $mode == perf || $mode == strace ]] && tool=$mode
[[ $mode == record ]] && tool=perf
command -v $tool >/dev/null || { echo "relay-instructions: $tool is not installed" >&2; exit 1; }

dir=$(mktemp -d -t elfgate-instr.XXXXXX)
mock_pid=
daemon_pid=
cleanup() {
    [[ -n $daemon_pid ]] && kill "$daemon_pid" 2>/dev/null || true
    [[ -n $mock_pid ]] && kill "$mock_pid" 2>/dev/null || true
    wait 2>/dev/null || true
    [[ ${KEEP:-0} == 1 ]] || rm -rf "$dir"
}
trap cleanup EXIT

# Waits until FILE has a line starting with PREFIX and prints the rest of that line.
wait_line() {
    local file=$1 prefix=$2 i
    for i in $(seq 1 600); do
        if line=$(grep -m1 "^$prefix" "$file" 2>/dev/null); then
            echo "${line#"$prefix"}"
            return 0
        fi
        sleep 0.1
    done
    echo "relay-instructions: no '$prefix' in $file" >&2
    return 1
}

$bin/elfgate-mockllm --bind 127.0.0.1:0 >"$dir/mock.out" 2>&1 &
mock_pid=$!
mock_base=$(wait_line "$dir/mock.out" "listening on ")

cat >"$dir/bench.toml" <<EOF
[server]
bind = "127.0.0.1:0"

[storage]
url = "sqlite://$dir/bench.db"

[defaults]
provider = "mock"

[providers.mock]
kind = "openai"
base_url = "$mock_base/v1"
default_model = "mock"
EOF
if [[ -n ${EXTRA_CONFIG:-} ]]; then
    cat "$EXTRA_CONFIG" >>"$dir/bench.toml"
fi

if [[ $mode == callgrind ]]; then
    wrap=(valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$dir/callgrind.out")
else
    wrap=()
fi
ELFGATE_LOG=warn "${wrap[@]}" "$daemon" serve --config "$dir/bench.toml" >"$dir/daemon.out" 2>"$dir/daemon.err" &
daemon_pid=$!
daemon_base=$(wait_line "$dir/daemon.out" "elfgate listening on ")
token=$(cat "$dir/token")

drive() {
    python3 - "$daemon_base" "$token" "$1" "$tokens" "$delay_ms" "$2" "${GATEWAY:-0}" <<'PY'
import json, re, sys, urllib.request
from concurrent.futures import ThreadPoolExecutor
base, token, n, tokens, delay, conc = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5], int(sys.argv[6])
gateway = sys.argv[7] == "1"
auth = {"Authorization": f"Bearer {token}"}
def completion(_):
    body = json.dumps({"model": f"mock/mock:tokens={tokens},delay_ms={delay}", "stream": True,
                       "messages": [{"role": "user", "content": "bench"}]}).encode()
    req = urllib.request.Request(f"{base}/v1/chat/completions", data=body, method="POST",
                                 headers={**auth, "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        data = r.read()
    if not data.rstrip().endswith(b"data: [DONE]") or len(re.findall(rb"tok[0-9]+ ", data)) != int(tokens):
        raise SystemExit("incomplete completion stream")
def session(_):
    body = json.dumps({"engine": "api", "prompt": "bench",
                       "model": f"mock:tokens={tokens},delay_ms={delay}"}).encode()
    req = urllib.request.Request(f"{base}/v1/sessions", data=body, method="POST",
                                 headers={**auth, "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        sid = json.load(r)["sessionId"]
    req = urllib.request.Request(f"{base}/v1/sessions/{sid}/events?until=complete", headers=auth)
    with urllib.request.urlopen(req, timeout=600) as r:
        data = r.read()
    if b"event: complete" not in data or data.count(b"tok") < int(tokens):
        raise SystemExit(f"session {sid}: incomplete stream")
with ThreadPoolExecutor(conc) as ex:
    list(ex.map(completion if gateway else session, range(n)))
PY
}

# The streamDelta events in the log and the rows holding them (a run's consecutive deltas committed
# together share a row, `last_seq - seq + 1` events), as "events rows" (the writer commits within
# 50 ms of an event).
count_deltas() {
    python3 -c "
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
cols = [r[1] for r in c.execute('pragma table_info(events)')]
n = 'coalesce(last_seq - seq, 0) + 1' if 'last_seq' in cols else '1'  # DAEMON=an older build
print(*c.execute(f\"select coalesce(sum({n}), 0), count(*) from events where type='streamDelta'\").fetchone())
" "$dir/bench.db"
}

drive "$concurrency" "$concurrency"
sleep 0.5
read -r warmup_deltas warmup_rows < <(count_deltas)
if [[ $mode == strace ]]; then
    strace -c -f -p "$daemon_pid" -o "$dir/strace.out" &
    perf_pid=$!
    sleep 0.5
    drive "$sessions" "$concurrency"
    kill -INT "$perf_pid"
    wait "$perf_pid" || true
    cat "$dir/strace.out"
elif [[ $mode == record ]]; then
    perf record -e "${PERF_RECORD_EVENT:-cpu-clock}" -g -p "$daemon_pid" -o "${PERF_DATA:-$PWD/perf.relay.data}" 2>/dev/null &
    perf_pid=$!
    sleep 0.5
    drive "$sessions" "$concurrency"
    kill -INT "$perf_pid"
    wait "$perf_pid" || true
elif [[ $mode == perf ]]; then
    perf stat -x, -e ${PERF_EVENTS:-raw_syscalls:sys_enter,context-switches,task-clock} -p "$daemon_pid" \
        -o "$dir/perf.out" &
    perf_pid=$!
    sleep 0.5
    drive "$sessions" "$concurrency"
    kill -INT "$perf_pid"
    wait "$perf_pid" || true
else
    callgrind_control --zero "$daemon_pid" >/dev/null 2>&1
    callgrind_control --instr=on "$daemon_pid" >/dev/null 2>&1
    drive "$sessions" "$concurrency"
    callgrind_control --instr=off "$daemon_pid" >/dev/null 2>&1
    callgrind_control --dump=workload "$daemon_pid" >/dev/null 2>&1
fi
sleep 0.5
read -r deltas rows < <(count_deltas)
deltas=$((deltas - warmup_deltas))
rows=$((rows - warmup_rows))
relayed=$((sessions * tokens))
echo "workload: $sessions sessions x $tokens tokens, delay ${delay_ms} ms, $concurrency at a time"
echo "streamDelta events: $deltas ($(awk -v r=$relayed -v d=$deltas "BEGIN { printf \"%.2f\", r / d }") tokens per event) in $rows log rows ($(awk -v d=$deltas -v n=$rows "BEGIN { printf \"%.2f\", d / n }") events per row)"
if [[ $mode == record ]]; then
    echo "profile: ${PERF_DATA:-$PWD/perf.relay.data} (perf report -i FILE)"
elif [[ $mode == perf ]]; then
    awk -F, -v t="$relayed" -v s="$sessions" '$3 ~ /sys_enter|context-switches/ {
        printf "%s: %d total, %.2f per token, %.0f per session\n", $3, $1, $1 / t, $1 / s }
        $3 ~ /task-clock/ { printf "CPU: %.0f ms, %.2f us per token, %.0f us per session\n",
        $1, $1 * 1000 / t, $1 * 1000 / s }' "$dir/perf.out"
else
    profile=$(ls -t "$dir"/callgrind.out* | head -1)
    total=$(sed -n 's/^totals: //p' "$profile" | tail -1 | awk '{print $1}')
    echo "instructions: $total total, $((total / sessions)) per session, $((total / relayed)) per token, $((total / deltas)) per streamDelta event"
    cp "$profile" ./callgrind.relay.out
    echo "profile: ./callgrind.relay.out (callgrind_annotate callgrind.relay.out)"
fi

#!/usr/bin/env bash
# Side by side, in one run, alternating rounds: envoyproxy/ratelimit with a
# local redis-server, sluice in memory, and a durable three-node sluice
# cluster (--fsync always), each serving Envoy's rate limit service, driven
# by sluice-rls-load with 50 callers and requests of 1 and of 3 descriptors.
# Prints one JSON line per run; the rules never deny (limits of 10^9/hour).
#
#   cmd/sluice-rls-load/compare.sh [rounds] [seconds]
#
# Needs service_cmd (envoyproxy/ratelimit) on PATH or in
# SLUICE_RATELIMIT_BIN, redis-server and redis-cli.
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-3}
secs=${2:-5}
callers=${CALLERS:-50}
rl=${SLUICE_RATELIMIT_BIN:-$(command -v service_cmd)}
go build -o bin/sluice ./cmd/sluice
go build -o bin/sluice-rls-load ./cmd/sluice-rls-load
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }

mkdir -p "$work/runtime/rl/config" "$work/rules"
cat >"$work/rules/bench.yaml" <<'YAML'
domain: bench
descriptors:
  - key: d0
    rate_limit: {unit: hour, requests_per_unit: 1000000000}
  - key: d1
    rate_limit: {unit: hour, requests_per_unit: 1000000000}
  - key: d2
    rate_limit: {unit: hour, requests_per_unit: 1000000000}
YAML
cp "$work/rules/bench.yaml" "$work/runtime/rl/config/"

# envoyproxy/ratelimit and its Redis.
rp=$(port)
redis-server --port "$rp" --bind 127.0.0.1 --save '' --appendonly no --dir "$work" >"$work/redis.log" 2>&1 &
redis_pid=$!; pids+=("$redis_pid")
until redis-cli -p "$rp" ping >/dev/null 2>&1; do sleep 0.05; done
eg=$(port); hp=$(port)
env USE_STATSD=false LOG_LEVEL=warn REDIS_SOCKET_TYPE=tcp REDIS_URL="127.0.0.1:$rp" \
  RUNTIME_ROOT="$work/runtime" RUNTIME_SUBDIRECTORY=rl RUNTIME_WATCH_ROOT=false \
  HOST=127.0.0.1 PORT="$hp" GRPC_HOST=127.0.0.1 GRPC_PORT="$eg" DEBUG_HOST=127.0.0.1 DEBUG_PORT="$(port)" \
  STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true "$rl" >"$work/ratelimit.log" 2>&1 &
envoy_pid=$!; pids+=("$envoy_pid")
until curl -sf "http://127.0.0.1:$hp/healthcheck" >/dev/null 2>&1; do sleep 0.1; done

# sluice in memory.
mg=$(port)
bin/sluice --in-memory --addr "127.0.0.1:$(port)" --rls-config "$work/rules" --rls-addr "127.0.0.1:$mg" --log-level warn >"$work/mem.log" 2>&1 &
mem_pid=$!; pids+=("$mem_pid")

# A durable three-node cluster, the callers spread over its nodes.
peers=""; declare -a resp raft grpc
for i in 1 2 3; do
  resp[$i]=$(port); raft[$i]=$(port); grpc[$i]=$(port)
  peers+="n$i=127.0.0.1:${raft[$i]},"
done
peers=${peers%,}
dur_pids=()
for i in 1 2 3; do
  bin/sluice --id "n$i" --addr "127.0.0.1:${resp[$i]}" --raft-addr "127.0.0.1:${raft[$i]}" --forward-addr "127.0.0.1:$(port)" \
    --data-dir "$work/n$i" --peers "$peers" --rls-config "$work/rules" --rls-addr "127.0.0.1:${grpc[$i]}" --log-level warn >"$work/n$i.log" 2>&1 &
  dur_pids+=($!); pids+=($!)
done
for i in 1 2 3; do
  until redis-cli -p "${resp[$i]}" RL.CHECK bench d0 x 2>/dev/null | grep -q OK; do sleep 0.1; done
done
dur_addrs="127.0.0.1:${grpc[1]},127.0.0.1:${grpc[2]},127.0.0.1:${grpc[3]}"
dur_pidlist=$(IFS=,; echo "${dur_pids[*]}")

for r in $(seq 1 "$rounds"); do
  for d in 1 3; do
    bin/sluice-rls-load -label "envoyproxy-ratelimit+redis round=$r" -addr "127.0.0.1:$eg" -callers "$callers" -descriptors "$d" -duration "${secs}s" -pids "$envoy_pid,$redis_pid"
    bin/sluice-rls-load -label "sluice-memory round=$r" -addr "127.0.0.1:$mg" -callers "$callers" -descriptors "$d" -duration "${secs}s" -pids "$mem_pid"
    bin/sluice-rls-load -label "sluice-durable-3 round=$r" -addr "$dur_addrs" -callers "$callers" -descriptors "$d" -duration "${secs}s" -pids "$dur_pidlist"
  done
done

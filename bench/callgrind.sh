#!/bin/bash
# Instructions per request of a server binary, counted by
# `valgrind --tool=callgrind` (repeatable whatever else the machine does).
#
#   bench/callgrind.sh BINARY [strings|ratelimit|scripts|all] [server args...]
#
# Runs BINARY (a leasehold-server release build) twice under callgrind with
# `--threads $THREADS` (default 2), driven by redis-benchmark (`-c 2 -P 16 -r 100000`) with
# 20 000 and then 100 000 requests of each workload, and prints the
# server's instructions per request: the difference of the two totals over
# the difference of the request counts, so startup and shutdown cancel.
# Workloads: strings = SET, GET, INCR; ratelimit = TOKENLEASE and
# CL.THROTTLE on random keys; all = both; scripts = EVALSHA of
# bench/lua/token_bucket.lua on random keys (alone). Needs valgrind, redis-cli and
# redis-benchmark. Port: $PORT (default 7331).
set -euo pipefail
BIN=$1
WHAT=${2:-all}
shift $(( $# >= 2 ? 2 : 1 ))
PORT=${PORT:-7331}

total() { # N -> the server's total instructions for N requests per workload
  local n=$1 d vp
  shift
  d=$(mktemp -d)
  valgrind --tool=callgrind --callgrind-out-file="$d/cg.out" "$BIN" --port "$PORT" \
    --threads "${THREADS:-2}" --save "" --appendonly no --dir "$d" "$@" >"$d/log" 2>&1 &
  vp=$!
  for _ in $(seq 1 300); do [ "$(redis-cli -p "$PORT" ping 2>/dev/null)" = PONG ] && break; sleep 0.2; done
  [ "$(redis-cli -p "$PORT" ping 2>/dev/null)" = PONG ] || { echo "the server did not start: $(cat "$d/log")" >&2; exit 1; }
  local b="redis-benchmark -p $PORT -q -c 2 -P 16 -r 100000 -n $n"
  local count=0
  if [ "$WHAT" = scripts ]; then
    local sha
    sha=$(redis-cli -p "$PORT" script load "$(cat "$(dirname "$0")/lua/token_bucket.lua")")
    $b evalsha "$sha" 1 tb:__rand_int__ 100 10 1000 1 >/dev/null
    count=1
  fi
  if [ "$WHAT" != ratelimit ] && [ "$WHAT" != scripts ]; then $b -t set,get,incr >/dev/null; count=$((count + 3)); fi
  if [ "$WHAT" != strings ] && [ "$WHAT" != scripts ]; then
    $b tokenlease rl:__rand_int__ 100 10 1000 1 >/dev/null
    $b cl.throttle gc:__rand_int__ 15 30 60 1 >/dev/null
    count=$((count + 2))
  fi
  redis-cli -p "$PORT" shutdown nosave >/dev/null 2>&1 || true
  wait "$vp" || true
  echo "$count $(grep -E '^(summary|totals):' "$d/cg.out" | head -1 | awk '{print $2}')"
  rm -rf "$d"
}

read -r k small < <(total 20000 "$@")
read -r _ large < <(total 100000 "$@")
echo "$(basename "$BIN") $WHAT: $(( (large - small) / (80000 * k) )) instructions per request"

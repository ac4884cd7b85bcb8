#!/usr/bin/env bash
# rate-limiter-flexible's RateLimiterRedis (through ioredis), pinned by
# package-lock.json, against redis-server 7 and then a Leasehold release
# build, each on port 7379 (COMPAT_PORT overrides it); prints each
# operation's result and the two pass counts. See compat/README.md.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../lib.sh"
port=${COMPAT_PORT:-7379}

(cd "$here" && npm ci --silent --no-audit --no-fund >&2)
bin=$(leasehold_bin)

pid=$(start_redis "$port")
redis_out=$(node "$here/run.js" 127.0.0.1 "$port" redis-server || true)
stop_server "$pid"
pid=$(start_leasehold "$port" "$bin")
lh_out=$(node "$here/run.js" 127.0.0.1 "$port" leasehold || true)
stop_server "$pid"

echo "$redis_out" | grep -v ': [0-9]* passed'
echo "$lh_out" | grep -v ': [0-9]* passed'
echo "rate-limiter-flexible 11.4.0 with ioredis 5.9.3:"
echo "$redis_out" | grep ': [0-9]* passed'
echo "$lh_out" | grep ': [0-9]* passed'

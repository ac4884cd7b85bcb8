# Shared by the compatibility runners (compat/*/run.sh): start a redis-server
# 7 or a Leasehold release build on a port, wait until it answers PING, and
# stop it by its process id. Source it; `set -euo pipefail` is the caller's.

compat_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# The Leasehold release binary, built if needed (in CARGO_TARGET_DIR when set).
leasehold_bin() {
    local target="${CARGO_TARGET_DIR:-$compat_root/target}"
    (cd "$compat_root" && cargo build --release -q -p leasehold-server >&2)
    echo "$target/release/leasehold-server"
}

# Waits up to 10 s for PING on port $1; fails otherwise.
wait_ready() {
    local port=$1
    for _ in $(seq 1 200); do
        if [ "$(redis-cli -p "$port" PING 2>/dev/null)" = "PONG" ]; then
            return 0
        fi
        sleep 0.05
    done
    echo "no server answered PING on port $port" >&2
    return 1
}

# Starts `redis-server` on port $1 with no persistence; prints its pid.
start_redis() {
    local port=$1
    if redis-cli -p "$port" PING >/dev/null 2>&1; then
        echo "port $port is taken: stop what listens there first" >&2
        return 1
    fi
    redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
        --daemonize no --logfile "" >/dev/null 2>&1 &
    local pid=$!
    wait_ready "$port"
    echo "$pid"
}

# Starts Leasehold ($2, the binary) on port $1 with no snapshot rules, its
# files in a fresh directory; prints its pid.
start_leasehold() {
    local port=$1 bin=$2
    if redis-cli -p "$port" PING >/dev/null 2>&1; then
        echo "port $port is taken: stop what listens there first" >&2
        return 1
    fi
    local dir
    dir=$(mktemp -d)
    "$bin" --port "$port" --save "" --dir "$dir" >/dev/null 2>&1 &
    local pid=$!
    wait_ready "$port"
    echo "$pid"
}

# Stops the server with pid $1 and waits (up to 10 s) until it is gone.
stop_server() {
    kill "$1" 2>/dev/null || true
    for _ in $(seq 1 200); do
        kill -0 "$1" 2>/dev/null || return 0
        sleep 0.05
    done
    kill -9 "$1" 2>/dev/null || true
}

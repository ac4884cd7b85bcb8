#!/usr/bin/env bash
# Regenerates docs/benchmarks.md: Leasehold against Redis 7 on this machine.
#
#   bench/compare.sh            # the full run (3 rounds, 1M-key memory rows)
#   bench/compare.sh --quick    # a smoke run of about a minute
#   bench/compare.sh --skip-throughput --skip-crosscheck --out /tmp/memory.md
#                               # memory and reclamation only (under 2 minutes)
#   bench/compare.sh --first-only
#                               # only "the first benchmark a user runs", put into the
#                               # existing docs/benchmarks.md in place of its old one
#                               # (about 3 minutes; --rounds 1 about 1)
#   bench/compare.sh --replication-only
#                               # only the replication section, put into the existing
#                               # docs/benchmarks.md in place of its old one (3-4 minutes)
#   bench/compare.sh --persistence-only
#                               # only the persistence section, likewise (about 3 minutes)
#   bench/compare.sh --scripts-only
#                               # only "scripts and data types", likewise
#   bench/compare.sh --hot-only # only "hot keys" (split on / off / Redis), likewise
#   bench/compare.sh --cluster-only
#                               # only the cluster section (3-primary Leasehold and Redis
#                               # clusters: redis-benchmark --cluster, one MOVED, a reshard
#                               # of 1 000 slots holding 1M keys), likewise; ports 7840-7852
#                               # and 17850-17852 (--cluster-port moves them)
#
# Installs Debian's redis-server when it is missing, builds the release
# binaries, then runs `leasehold-bench compare` (any flags are passed on;
# `target/release/leasehold-bench compare --help` lists them).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v redis-server >/dev/null 2>&1; then
    sudo=""
    if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
    $sudo apt-get update
    $sudo apt-get install -y --no-install-recommends redis-server redis-tools
fi
case "$(redis-server --version)" in
    *v=7.*) ;;
    *) echo "compare.sh: expected Redis 7, found: $(redis-server --version)" >&2 ;;
esac

cargo build --release -p leasehold-server -p leasehold-bench
cargo build --release -p leasehold-client --example lease_calls
target="${CARGO_TARGET_DIR:-target}"
exec "$target/release/leasehold-bench" compare --leasehold-bin "$target/release/leasehold-server" "$@"

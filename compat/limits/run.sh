#!/usr/bin/env bash
# The Python `limits` package's own Redis-backed tests (pytest -m redis),
# from its source distribution on PyPI pinned below, against redis-server 7
# and then a Leasehold release build, each on port 7379 where the tests
# expect it; prints the two pass counts. See compat/README.md.
#
# COMPAT_PORT runs both on another port (the tests' 7379 is rewritten in
# the extracted copy); COMPAT_WORK keeps the downloads and the virtualenv
# (default: compat/limits/.work).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../lib.sh"
version=5.8.0
port=${COMPAT_PORT:-7379}
work=${COMPAT_WORK:-$here/.work}
mkdir -p "$work"

if [ ! -d "$work/venv" ]; then
    python3 -m venv "$work/venv"
fi
py="$work/venv/bin/python"
"$py" -m pip install -q --disable-pip-version-check -r "$here/requirements.txt" >&2
if [ ! -f "$work/limits-$version.tar.gz" ]; then
    "$py" -m pip download -q --disable-pip-version-check --no-binary :all: --no-deps \
        "limits==$version" -d "$work" >&2
fi
# One extracted copy per port: on another port than 7379 its tests' port
# is rewritten.
src="$work/port-$port/limits-$version"
if [ ! -d "$src" ]; then
    mkdir -p "$work/port-$port"
    tar -xzf "$work/limits-$version.tar.gz" -C "$work/port-$port"
    if [ "$port" != 7379 ]; then
        grep -rl 'localhost:7379\|"localhost", 7379' "$src/tests" | xargs sed -i \
            -e "s/localhost:7379/localhost:$port/g" -e "s/\"localhost\", 7379/\"localhost\", $port/g"
    fi
fi
bin=$(leasehold_bin)

# The Redis-backed tests (but the benchmarks, and those needing another
# server: a Unix socket), as the suite's own `-m redis` selects them.
run_suite() {
    local name=$1 report="$work/$1.xml"
    (cd "$src" && PYTHONPATH="$here:$src" "$py" -m pytest -p docker_stub -p no:cacheprovider \
        -o addopts="" -m "redis and not benchmark" --ignore=tests/benchmarks -k "not uds" -q --tb=line --junitxml="$report" tests \
        >"$work/$name.log" 2>&1) || true
    if [ ! -f "$report" ]; then
        echo "$name: the suite did not run (see $work/$name.log)" >&2
        echo "0 0 0 0"
        return
    fi
    "$py" "$here/count.py" "$report"
}

pid=$(start_redis "$port")
read -r r_pass r_fail r_err r_skip < <(run_suite redis-server)
stop_server "$pid"
pid=$(start_leasehold "$port" "$bin")
read -r l_pass l_fail l_err l_skip < <(run_suite leasehold)
stop_server "$pid"

echo "limits $version, its Redis-backed tests (logs in $work):"
echo "redis-server: $r_pass passed, $r_fail failed, $r_err errors, $r_skip skipped"
echo "leasehold: $l_pass passed, $l_fail failed, $l_err errors, $l_skip skipped"

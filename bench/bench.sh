#!/usr/bin/env bash
# Throughput and memory benchmark.
#
#   bench/bench.sh [JOBS] [CONCURRENCY] [MODE]
#
# Defaults: 5000 jobs, concurrency 8, mode "process". Starts a private
# redis-server on a unix socket, pushes JOBS no-op jobs in Laravel's payload
# format, runs `laravel-worker work --stop-when-empty`, and prints jobs/s and
# the daemon's peak resident memory (VmHWM; handlers are not counted).
# MODE "process": /bin/true per job. MODE "persistent": CONCURRENCY warm sh
# processes answering each request on fd 3.
set -euo pipefail
jobs=${1:-5000}
concurrency=${2:-8}
mode=${3:-process}
root=$(cd "$(dirname "$0")/.." && pwd)
cargo build --release --quiet --manifest-path "$root/Cargo.toml"
bin="$root/target/release/laravel-worker"

dir=$(mktemp -d)
redis-server --port 0 --unixsocket "$dir/redis.sock" --save "" --appendonly no --dir "$dir" >/dev/null &
redis_pid=$!
trap 'kill $redis_pid 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 100); do [ -S "$dir/redis.sock" ] && break; sleep 0.05; done

cat >"$dir/bench.toml" <<TOML
[redis]
url = "unix://$dir/redis.sock?db=0"
prefix = "bench_"
[cache]
store = "none"
[failed]
driver = "null"
TOML
if [ "$mode" = persistent ]; then
  # Answers each request with its call number (the request's first key).
  cat >"$dir/warm.sh" <<'SH'
#!/bin/sh
while IFS= read -r line; do
  call=${line#{\"call\":}
  printf '{"call":%s,"action":"done"}\n' "${call%%,*}" >&3
done
SH
  chmod +x "$dir/warm.sh"
  printf '[[handlers]]\nmatch = "*"\ncommand = ["%s"]\nmode = "persistent"\nprocesses = %s\n' \
    "$dir/warm.sh" "$concurrency" >>"$dir/bench.toml"
else
  printf '[[handlers]]\nmatch = "*"\ncommand = ["/bin/true"]\n' >>"$dir/bench.toml"
fi

RUST_LOG=warn "$bin" --config "$dir/bench.toml" push default --job 'App\Jobs\Noop' --count "$jobs"

start=$(date +%s.%N)
RUST_LOG=warn "$bin" --config "$dir/bench.toml" work --stop-when-empty --sleep=0 \
  --concurrency="$concurrency" >/dev/null &
worker=$!
peak_kb=0
while kill -0 "$worker" 2>/dev/null; do
  hwm=$(awk '/^VmHWM/ {print $2}' "/proc/$worker/status" 2>/dev/null || true)
  [ -n "$hwm" ] && peak_kb=$hwm
  sleep 0.02
done
wait "$worker"
end=$(date +%s.%N)

awk -v n="$jobs" -v c="$concurrency" -v m="$mode" -v s="$start" -v e="$end" -v kb="$peak_kb" 'BEGIN {
  t = e - s
  printf "mode: %s  jobs: %d  concurrency: %d  time: %.2f s  throughput: %.0f jobs/s  peak RSS: %.1f MiB\n", m, n, c, t, n / t, kb / 1024
}'

#!/usr/bin/env bash
# The capacity model's inputs (docs/operations.md, "Capacity"): CPU per request of the API
# process and of Postgres, per request type. Loads 100,000 subscriptions and 1,000,000 events
# (bench/api/load.sql) into a fresh database, starts the release `api`, drives each path with
# wrk for DURATION seconds after a 2 s warm-up, and divides the CPU time the API process and
# every Postgres process used (utime + stime, /proc/<pid>/stat) by the requests served. On a
# machine this small both compete for the same cores, which is why the figure is CPU per
# request and not requests per second: requests/s per core of a role = 1,000,000 / its µs.
#
# Environment: TEST_DATABASE_ADMIN_URL, DURATION (default 10), CONNECTIONS (default 16),
# API_BIN (skip the build), KEEP_DB=1.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

ADMIN_URL=${TEST_DATABASE_ADMIN_URL:-postgres://postgres@127.0.0.1:5432/postgres}
DURATION=${DURATION:-10}
CONNECTIONS=${CONNECTIONS:-16}
WALLET_HEX=3c44cdddb6a900fa2b585dd299e03d12fa4293bc
command -v wrk >/dev/null || scripts/apt-packages wrk
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target/bench}
[[ -n "${API_BIN:-}" ]] || cargo build -q --release -p chainsub-api --bins
API=${API_BIN:-$CARGO_TARGET_DIR/release/api}

db=chainsub_capacity_$$
db_url="${ADMIN_URL%/*}/$db"
work=$(mktemp -d)
api_pid=
cleanup() {
  [[ -n "$api_pid" ]] && kill "$api_pid" 2>/dev/null && wait "$api_pid" 2>/dev/null || true
  [[ "${KEEP_DB:-}" == 1 ]] || psql -q "$ADMIN_URL" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" || true
  rm -rf "$work"
}
trap cleanup EXIT

export DATABASE_URL="$db_url"
psql -q "$ADMIN_URL" -c "CREATE DATABASE $db"
"$API" migrate >/dev/null
KEY=$("$API" admin create-key --wallet "0x$WALLET_HEX" 2>/dev/null)
echo "==> loading 100,000 subscriptions and 1,000,000 events into $db"
psql -q "$db_url" -v wallet="'\\x$WALLET_HEX'::bytea" -f bench/api/load.sql
psql -q "$db_url" -c "VACUUM ANALYZE"
sub=$(psql -tA "$db_url" -c "SELECT public_id FROM subscriptions ORDER BY id LIMIT 1 OFFSET 5000")
evt=$(psql -tA "$db_url" -c "SELECT public_id FROM chain_events WHERE public_id IS NOT NULL ORDER BY id LIMIT 1 OFFSET 50000")

API_LISTEN=127.0.0.1:0 BASE_URL=http://127.0.0.1 CHAIN_ID=31337 \
CONTRACT_ADDRESS=0xcccccccccccccccccccccccccccccccccccccccc \
USDC_ADDRESS=0xdddddddddddddddddddddddddddddddddddddddd \
CHECKOUT_SIGNING_SECRET=bench NO_DISPATCHER=true DATABASE_POOL_SIZE=16 \
WEBHOOK_SECRETS_KEYS=test:AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA= \
RATE_LIMIT_KEY_PER_SEC=10000000 RATE_LIMIT_KEY_BURST=10000000 RUST_LOG=warn \
  "$API" serve >"$work/api.log" 2>&1 &
api_pid=$!
addr=
for _ in $(seq 1 100); do
  addr=$(sed -n 's/^listening on //p' "$work/api.log" | head -n1)
  [[ -n "$addr" ]] && break
  sleep 0.1
done
[[ -n "$addr" ]] || { cat "$work/api.log" >&2; exit 1; }

hz=$(getconf CLK_TCK)
# CPU ticks (user + system) of the API process, and of every Postgres process.
api_ticks() { awk '{print $14 + $15}' "/proc/$api_pid/stat"; }
pg_ticks() {
  local t=0 p
  for p in $(pgrep -u postgres); do
    t=$(( t + $(awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null || echo 0) ))
  done
  echo "$t"
}
drive() { wrk -t2 -c"$CONNECTIONS" -d"$1s" -H "Authorization: Bearer $KEY" "http://$addr$2"; }

echo "==> $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD), load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '| request | req/s | API µs/request | Postgres µs/request | per API core | per Postgres core |\n|---|---|---|---|---|---|\n'
for path in \
  "/api/v1/subscriptions?limit=20" \
  "/api/v1/subscriptions/$sub" \
  "/api/v1/events?limit=100" \
  "/api/v1/events/$evt" \
  "/api/v1/reports/summary" \
  "/api/v1/reports/revenue"; do
  drive 2 "$path" >/dev/null
  a0=$(api_ticks); p0=$(pg_ticks)
  drive "$DURATION" "$path" >"$work/wrk.out"
  a1=$(api_ticks); p1=$(pg_ticks)
  n=$(awk '/requests in/ {print $1}' "$work/wrk.out")
  rps=$(awk '/^Requests\/sec/ {printf "%d", $2}' "$work/wrk.out")
  api_us=$(( (a1 - a0) * 1000000 / hz / n ))
  pg_us=$(( (p1 - p0) * 1000000 / hz / n ))
  label=${path//$sub/{id\}}
  label=${label//$evt/{id\}}
  printf '| `GET %s` | %s | %s | %s | %s | %s |\n' "$label" "$rps" "$api_us" "$pg_us" \
    "$(( 1000000 / (api_us > 0 ? api_us : 1) ))" "$(( 1000000 / (pg_us > 0 ? pg_us : 1) ))"
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

#!/usr/bin/env bash
# Ledger export benchmark (issue 12, point 8): loads 1,000,000 ledger entries of one merchant
# (100,000 subscriptions x 10 charges, rows shaped like the indexer's) into a fresh database,
# starts the release `api`, and streams the whole ledger through GET /api/v1/ledger as NDJSON
# and as CSV to /dev/null. Prints entries/s, bytes, and the api process's peak RSS (VmHWM)
# before and after each export — an export in constant memory leaves it where it was — next
# to the physical limit measured in the same run: psql \copy of the same SELECT to /dev/null.
#
# Environment: TEST_DATABASE_ADMIN_URL (default postgres://postgres@127.0.0.1:5432/postgres),
# ENTRIES (default 1000000, a multiple of 10), KEEP_DB=1 to keep the DB, API_BIN (use this
# binary instead of building).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

ADMIN_URL=${TEST_DATABASE_ADMIN_URL:-postgres://postgres@127.0.0.1:5432/postgres}
ENTRIES=${ENTRIES:-1000000}
SUBS=$((ENTRIES / 10))
WALLET_HEX=3c44cdddb6a900fa2b585dd299e03d12fa4293bc

export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target/bench}
if [[ -z "${API_BIN:-}" ]]; then
  cargo build -q --release -p chainsub-api --bins
fi
API=${API_BIN:-$CARGO_TARGET_DIR/release/api}

db="chainsub_export_bench_$$"
db_url="${ADMIN_URL%/*}/$db"
work=$(mktemp -d)
api_pid=
cleanup() {
  [[ -n "$api_pid" ]] && kill "$api_pid" 2>/dev/null && wait "$api_pid" 2>/dev/null || true
  [[ "${KEEP_DB:-}" == 1 ]] || psql -q "$ADMIN_URL" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" || true
  rm -rf "$work"
}
trap cleanup EXIT

psql -q "$ADMIN_URL" -c "CREATE DATABASE $db"
export DATABASE_URL="$db_url"
"$API" migrate >/dev/null
KEY=$("$API" admin create-key --wallet "0x$WALLET_HEX" 2>/dev/null)
echo "==> loading $ENTRIES ledger entries ($SUBS subscriptions)"
t0=$(date +%s)
psql -q "$db_url" -v ON_ERROR_STOP=1 -v wallet="'\\x$WALLET_HEX'::bytea" -v n="$ENTRIES" -v subs="$SUBS" <<'SQL'
BEGIN;
INSERT INTO indexer_cursor (chain_id, contract, block_number, block_hash, head_number)
VALUES (31337, '\xcccccccccccccccccccccccccccccccccccccccc', 10000000, '\x00', 10000000);
-- SubscriptionCharged logs: topics [sig, id, merchant, subscriber], 10 per block; every
-- subscription has a subscriber wallet of its own (one EIP-55 checksum each, as live data).
INSERT INTO chain_events (public_id, chain_id, contract, block_number, block_hash, block_time,
    transaction_hash, transaction_index, log_index, name, kind, merchant_wallet, subscription_id,
    plan_id, topics, data)
SELECT 'evt_' || md5('e' || g), 31337, '\xcccccccccccccccccccccccccccccccccccccccc'::bytea,
       g / 10 + 1, decode(md5('b' || (g / 10 + 1)) || md5('B' || (g / 10 + 1)), 'hex'),
       timestamptz '2026-01-01' + make_interval(secs => g * 12),
       decode(md5('t' || g) || md5('T' || g), 'hex'), 0, g % 10, 'SubscriptionCharged',
       'subscription.charged', :wallet, g % :subs + 1, 1,
       ARRAY['\x00'::bytea, '\x00'::bytea, '\x00'::bytea,
             decode(repeat('00', 12) || md5('w' || (g % :subs + 1))
                    || left(md5('W' || (g % :subs + 1)), 8), 'hex')],
       '\x'::bytea
FROM generate_series(0, :n - 1) g;
INSERT INTO subscriptions (chain_id, onchain_id, public_id, merchant_wallet, subscriber,
    plan_onchain_id, amount, customer_ref, customer_external_id, status, period,
    current_period_start, current_period_end, created_event_id, last_event_id, created_at,
    updated_at, event_count)
SELECT 31337, s, 'sub_' || md5('s' || s), :wallet,
       decode(md5('w' || s) || left(md5('W' || s), 8), 'hex'),
       1, 9990000, ('\x' || repeat('00', 32))::bytea, 'cust-' || s, 'active', 10,
       timestamptz '2026-01-01', timestamptz '2026-02-01', 1, 1, timestamptz '2026-01-01',
       timestamptz '2026-01-01', 0
FROM generate_series(1, :subs) s;
INSERT INTO ledger_entries (event_id, chain_id, subscription_id, kind, amount, period,
    period_start, period_end, attempt, block_time)
SELECT id, 31337, subscription_id, 'charge', 9990000, 1 + (id - 1) / :subs,
       timestamptz '2026-01-01', timestamptz '2026-02-01', 1, block_time
FROM chain_events;
COMMIT;
ANALYZE;
SQL
echo "loaded in $(( $(date +%s) - t0 ))s: $(psql -tA "$db_url" -c "SELECT count(*) FROM ledger_entries") ledger entries"

API_LISTEN=127.0.0.1:0 BASE_URL=http://127.0.0.1 CHAIN_ID=31337 CONFIRMATIONS=1 \
CONTRACT_ADDRESS=0xcccccccccccccccccccccccccccccccccccccccc \
USDC_ADDRESS=0xdddddddddddddddddddddddddddddddddddddddd \
CHECKOUT_SIGNING_SECRET=bench NO_DISPATCHER=true RUST_LOG=warn  WEBHOOK_SECRETS_KEYS=test:AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA= \
  "$API" serve >"$work/api.log" 2>&1 &
api_pid=$!
addr=
for _ in $(seq 1 100); do
  addr=$(sed -n 's/^listening on //p' "$work/api.log" | head -n1)
  [[ -n "$addr" ]] && break
  sleep 0.1
done
[[ -n "$addr" ]] || { cat "$work/api.log" >&2; exit 1; }
hwm() { awk '/^VmHWM/ {print int($2 / 1024)}' "/proc/$api_pid/status"; }
curl -fsS -H "Authorization: Bearer $KEY" "http://$addr/api/v1/health" >/dev/null

# The physical limit: the export's own SELECT (store/src/export.rs), parameters filled in,
# copied out by Postgres to psql with nothing done to the rows.
mid=$(psql -tA "$db_url" -c "SELECT id FROM merchants WHERE wallet = '\\x$WALLET_HEX'")
sql="SELECT ce.public_id, le.kind, le.amount::TEXT AS amount, le.period, le.attempt, le.failure_reason, le.block_time, ce.chain_id, ce.contract, ce.block_number, ce.block_hash, ce.transaction_hash, ce.log_index, COALESCE(s.subscriber, substring(ce.topics[4] from 13)) AS subscriber, le.subscription_id, s.public_id, s.plan_onchain_id, p.public_id, s.customer_external_id FROM chain_events ce JOIN ledger_entries le ON le.event_id = ce.id LEFT JOIN subscriptions s ON s.chain_id = le.chain_id AND s.onchain_id = le.subscription_id LEFT JOIN chain_plans cp ON cp.chain_id = s.chain_id AND cp.onchain_id = s.plan_onchain_id LEFT JOIN plans p ON p.plan_ref = cp.plan_ref AND p.merchant_id = $mid WHERE ce.merchant_wallet = '\\x$WALLET_HEX' AND ce.kind IS NOT NULL AND ce.chain_id = 31337 AND ce.block_number BETWEEN 0 AND 10000000 ORDER BY ce.id"
t0=$(date +%s.%N)
psql -q "$db_url" -c "\\copy ($sql) TO '/dev/null'"
copy_s=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')

printf '\n%-28s %10s %10s %12s %12s %14s %14s\n' "export of $ENTRIES" "seconds" "entries/s" "MB" "vs \\copy" "RSS before MB" "peak RSS MB"
printf '%-28s %10s %10s %12s %12s %14s %14s\n' "psql \\copy (same SELECT)" "$copy_s" \
  "$(awk -v n="$ENTRIES" -v s="$copy_s" 'BEGIN { printf "%d", n / s }')" "-" "1.00" "-" "-"
for fmt in ndjson csv; do
  before=$(hwm)
  read -r secs bytes < <(curl -fsS -o >(tail -n 2 > "$work/$fmt.tail") \
    -w '%{time_total} %{size_download}\n' \
    -H "Authorization: Bearer $KEY" "http://$addr/api/v1/ledger?format=$fmt")
  sleep 0.5
  printf '%-28s %10.2f %10s %12s %12s %14s %14s\n' "GET /api/v1/ledger ($fmt)" "$secs" \
    "$(awk -v n="$ENTRIES" -v s="$secs" 'BEGIN { printf "%d", n / s }')" \
    "$(awk -v b="$bytes" 'BEGIN { printf "%.0f", b / 1048576 }')" \
    "$(awk -v c="$copy_s" -v s="$secs" 'BEGIN { printf "%.2f", c / s }')" "$before" "$(hwm)"
  # The charge total closes the body and counts every entry.
  tr -d '\r' < "$work/$fmt.tail" | grep -qE "\"entries\":$ENTRIES[,}]|,$ENTRIES\$" || {
    echo "the $fmt export did not end with a total of $ENTRIES entries:" >&2
    cat "$work/$fmt.tail" >&2
    exit 1
  }
done
echo
echo "vs \\copy = the seconds of a bare psql \\copy of the same rows over the export's seconds."
echo "Peak RSS is the api process's VmHWM (its high-water mark since start) before and after."
echo "Machine: $(nproc) cores shared by api, Postgres and curl; load average now: $(cut -d' ' -f1-3 /proc/loadavg)."

#!/usr/bin/env bash
# The list endpoints on large tables: bench/api/run's subscriptions and events measurements
# (throughput against the same SQL through pgbench, and p50/p99 at ~1,000 req/s) on 100,000
# subscriptions / 1,000,000 chain events, then on LARGE_SUBS subscriptions (default
# 1,000,000: 10,000,000 events), one after the other on the same machine. Bench only (the
# large load takes minutes and ~25 GB); not part of CI.
#   bench/large-tables.sh                       DURATION, CONNECTIONS as bench/api/run
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# The small size also measures the reports: its CPU-per-request table is the capacity model's
# input (docs/operations.md, "Capacity").
only=subscriptions,events,reports
for subs in 100000 "${LARGE_SUBS:-1000000}"; do
  echo "===== $subs subscriptions, $(( subs * 10 )) events ====="
  SUBS=$subs ONLY=$only ROUNDS=${ROUNDS:-1} bench/api/run
  only=subscriptions,events
done

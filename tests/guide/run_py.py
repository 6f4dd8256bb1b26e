"""Runs docs/integration.md's Python snippet as a merchant would, on every delivery of a file.

Usage: python tests/guide/run_py.py SNIPPET.py DELIVERIES.json, with CHAINSUB_WEBHOOK_SECRET
set; DELIVERIES.json is [{"body": "<raw body>", "headers": {...}}]. Prints one JSON line per
delivery: {"ok": true, "id", "type"} or {"ok": false, "error"}.
"""

import importlib.util
import json
import sys

spec = importlib.util.spec_from_file_location("snippet", sys.argv[1])
snippet = importlib.util.module_from_spec(spec)
spec.loader.exec_module(snippet)
with open(sys.argv[2], encoding="utf-8") as f:
    deliveries = json.load(f)
for d in deliveries:
    try:
        event = snippet.verify_delivery(d["body"].encode("utf-8"), d["headers"])
        print(json.dumps({"ok": True, "id": event["id"], "type": event["type"]}))
    except Exception as e:  # noqa: BLE001 - every refusal is reported, whatever its class
        print(json.dumps({"ok": False, "error": f"{type(e).__name__}: {e}"}))

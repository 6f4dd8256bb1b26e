-- Paces each connection: every request waits DELAY_MS before it is sent, so the offered
-- rate is about connections * 1000 / (DELAY_MS + latency). Set by bench/api/run.
local delay_ms = tonumber(os.getenv("DELAY_MS") or "0")
function delay()
  return delay_ms
end

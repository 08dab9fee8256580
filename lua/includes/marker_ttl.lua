-- Include: marker_ttl(timeout_s, max_retries, retry_max_s) — how long a run marker may live, in
-- ms, for a job of those options (nil: the default).

-- The marker outlives any plausible run (timeout x attempts, plus backoff), unless its end is
-- recorded first.
local function marker_ttl(timeout, max_retries, retry_max)
  local attempts = (tonumber(max_retries) or 3) + 1
  return math.floor(((tonumber(timeout) or 3600) + (tonumber(retry_max) or 3600)) * attempts
                    * 1000) + 60000
end

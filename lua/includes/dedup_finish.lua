-- Include: dedup_finish(key) — an enqueued job with its own execution id ended: the id stays
-- taken for the window its key holds (ms), counted from now. Nothing when the key is gone or of
-- another type.
-- @include rcall
-- @include key_is

local function dedup_finish(key)
  if not key_is(key, 'string') then return end
  local window = tonumber(rcall('GET', key))
  if not window then return end
  if window <= 0 then rcall('DEL', key) else rcall('PEXPIRE', key, window) end
end

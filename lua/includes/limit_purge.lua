-- Include: limit_purge(L, now) — release the holds that lapsed (their holder's heartbeat
-- stopped: the worker died or lost its entries) and drop the starts that left their window, a
-- bounded number per call (every limit call purges, so the rest follow).
-- @include rcall
-- @include limit_release
-- @include limit_idle

local function limit_purge(L, now)
  for _, m in ipairs(rcall('ZRANGEBYSCORE', L.holds, '-inf', now, 'LIMIT', 0, 100)) do
    local key, exec = string.match(m, '^(.-)%z(.*)$')
    if key then limit_release(L, now, exec, {key}) else rcall('ZREM', L.holds, m) end
  end
  local old = rcall('ZRANGEBYSCORE', L.expiry, '-inf', now, 'LIMIT', 0, 200)
  if #old > 0 then
    rcall('ZREM', L.expiry, unpack(old))
    rcall('ZREM', L.starts, unpack(old))
    local seen = {}
    for _, m in ipairs(old) do
      local key = string.match(m, '^(.-)%z')
      if key and not seen[key] then
        seen[key] = true
        limit_idle(L, key)
      end
    end
  end
end

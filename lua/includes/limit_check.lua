-- Include: limit_check(L, now, exec, order, lims, cache) — may job `exec` (of waiting order
-- `order`) start now, holding every one of lims ({{template, key, concurrency|null, count, ms},
-- …})? A key it already holds (granted by a resume, or it was reclaimed) is its own. Otherwise a
-- key lets it start when it is under its concurrency, under its rate in the window ending now,
-- and no job waits on it from an earlier order (waiting jobs go first: a new job never
-- overtakes them).
-- Returns the plan for limit_grant ({{key, template, count, ms, held already, concurrency}, …}),
-- or nil, the first key that stops it, and when that key may let it start (ms; -1: when a hold
-- is released).
-- @include rcall
-- @include limit_numbers
-- @include limit_head

local function limit_check(L, now, exec, order, lims, cache)
  local plan = {}
  for i, lim in ipairs(lims) do
    local tmpl, key = lim[1], lim[2]
    local c = lim[3]
    if type(c) ~= 'number' then c = nil end
    local n, ms = tonumber(lim[4]) or 0, tonumber(lim[5]) or 0
    c, n, ms = limit_numbers(L, key, c, n, ms, cache)
    local mine = rcall('ZSCORE', L.holds, key .. '\0' .. exec) ~= false
    if not mine then
      if c and tonumber(rcall('HGET', L.held, key) or 0) >= c then return nil, key, -1 end
      if n > 0 and ms > 0 then
        local lo = '[' .. key .. '\0' .. string.format('%013d', now - ms + 1)
        local hi = '(' .. key .. '\1'
        if rcall('ZLEXCOUNT', L.starts, lo, hi) >= n then
          local oldest = rcall('ZRANGEBYLEX', L.starts, lo, hi, 'LIMIT', 0, 1)[1]
          return nil, key, tonumber(string.sub(oldest, #key + 2, #key + 14)) + ms
        end
      end
      -- (Whether anything waits at all is read once per call: mostly nothing does.)
      if cache.waiting == nil then cache.waiting = rcall('EXISTS', L.waiting) == 1 end
      local head = cache.waiting and limit_head(L, key)
      if head and string.match(head, '^.-%z([^%z]*)%z') < order then return nil, key, now end
    end
    plan[i] = {key, tmpl, n, ms, mine, c or ''}
  end
  return plan
end

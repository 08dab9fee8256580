-- Include: limit_release(L, now, exec, keys, cache) — the job `exec` lets go of its holds on
-- keys (a list of limit keys, or of {key, template} pairs, which spares reading the template;
-- a key it does not hold is skipped). A key with waiting jobs becomes ready now (the workers'
-- resume calls start them); one left idle forgets its numbers. `cache` (a table, or nil) keeps
-- what the call read once: whether anything waits at all. Returns how many keys became ready.
-- @include rcall
-- @include limit_head
-- @include limit_template

local function limit_release(L, now, exec, keys, cache)
  cache = cache or {}
  local woke = 0
  for _, k in ipairs(keys) do
    local key, tmpl = k, nil
    if type(k) == 'table' then key, tmpl = k[1], k[2] end
    if rcall('ZREM', L.holds, key .. '\0' .. exec) == 1 then
      local left = rcall('HINCRBY', L.held, key, -1)
      tmpl = tmpl or limit_template(L, key)
      if tmpl then rcall('HINCRBY', L.counts, 'h:' .. tmpl, -1) end
      if left <= 0 then rcall('HDEL', L.held, key) end
      if cache.waiting == nil then cache.waiting = rcall('EXISTS', L.waiting) == 1 end
      if cache.waiting and limit_head(L, key) then
        rcall('ZADD', L.ready, 'LT', now, key)
        woke = woke + 1
      elseif left <= 0
             and rcall('ZLEXCOUNT', L.starts, '[' .. key .. '\0', '(' .. key .. '\1') == 0 then
        rcall('HDEL', L.keys, key)  -- idle: nothing holds it, waits on it or started
      end
    end
  end
  return woke
end

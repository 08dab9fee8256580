-- Include: limit_release(L, now, exec, keys) — the job `exec` lets go of its holds on keys (a
-- list of limit keys; one it does not hold is skipped). A key with waiting jobs becomes ready
-- now (the workers' resume calls start them). Returns how many keys became ready.
-- @include rcall
-- @include limit_head
-- @include limit_idle
-- @include limit_template

local function limit_release(L, now, exec, keys)
  local woke = 0
  for _, key in ipairs(keys) do
    if rcall('ZREM', L.holds, key .. '\0' .. exec) == 1 then
      local left = rcall('HINCRBY', L.held, key, -1)
      local tmpl = limit_template(L, key)
      if tmpl then rcall('HINCRBY', L.counts, 'h:' .. tmpl, -1) end
      if left <= 0 then rcall('HDEL', L.held, key) end
      if limit_head(L, key) then
        rcall('ZADD', L.ready, 'LT', now, key)
        woke = woke + 1
      elseif left <= 0 then
        limit_idle(L, key)
      end
    end
  end
  return woke
end

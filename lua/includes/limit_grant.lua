-- Include: limit_grant(L, now, exec, plan, deadline) — job `exec` takes the holds of a plan from
-- limit_check: a hold on each key until `deadline` (ms; its heartbeat renews it), and a start in
-- the window of each rated key it did not hold already. The key's declared numbers are noted
-- (for Client.limits) by its first holder, and by each rated start.
-- @include rcall

local function limit_grant(L, now, exec, plan, deadline)
  for _, p in ipairs(plan) do
    local key, tmpl, n, ms, mine = p[1], p[2], p[3], p[4], p[5]
    rcall('ZADD', L.holds, deadline, key .. '\0' .. exec)
    if not mine then
      local first = rcall('HINCRBY', L.held, key, 1) == 1
      rcall('HINCRBY', L.counts, 'h:' .. tmpl, 1)
      if n > 0 and ms > 0 then
        local s = key .. '\0' .. string.format('%013d', now) .. '\0' .. exec
        rcall('ZADD', L.starts, 0, s)
        rcall('ZADD', L.expiry, now + ms, s)
      end
      if first or n > 0 then
        rcall('HSET', L.keys, key, tmpl .. '\0' .. p[6] .. '\0' .. n .. '\0' .. ms)
      end
    end
  end
end

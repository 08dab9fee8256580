-- Include: limit_idle(L, key) — forget a key's declared numbers once nothing holds it, waits on
-- it or started in its window: an idle key keeps nothing in Redis.
-- @include rcall
-- @include limit_head

local function limit_idle(L, key)
  if not rcall('HGET', L.held, key) and not limit_head(L, key)
     and rcall('ZLEXCOUNT', L.starts, '[' .. key .. '\0', '(' .. key .. '\1') == 0 then
    rcall('HDEL', L.keys, key)
  end
end

-- Include: limit_keys_ok(L) — true when every key of the limits is absent or of its type, so a
-- limit script refuses keys someone else overwrote before its first write.
-- @include key_is

local function limit_keys_ok(L)
  for _, name in ipairs({'holds', 'starts', 'expiry', 'waiting', 'ready'}) do
    if not key_is(L[name], 'zset') then return false end
  end
  for _, name in ipairs({'held', 'jobs', 'keys', 'set', 'patterns', 'counts'}) do
    if not key_is(L[name], 'hash') then return false end
  end
  return true
end

-- Include: key_is(key, want) — true when the key is absent or of the wanted type.
-- @include rcall

-- Lets a script refuse a key someone else overwrote *before* its first write instead of failing
-- halfway.
local function key_is(key, want)
  local t = rcall('TYPE', key)['ok']
  return t == 'none' or t == want
end

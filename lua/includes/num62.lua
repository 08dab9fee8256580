-- Include: num62(s) — the integer of base 62 text s (b62_digits.lua; '' = 0).
-- @include b62_digits

local B62_VALUE = {}
for i = 1, 62 do B62_VALUE[string.byte(B62_DIGITS, i)] = i - 1 end

local function num62(s)
  local v, sign, from = 0, 1, 1
  if string.byte(s, 1) == 45 then sign, from = -1, 2 end
  for i = from, #s do v = v * 62 + (B62_VALUE[string.byte(s, i)] or 0) end
  return sign * v
end

-- Include: b62(n) — n (an integer) in base 62 (b62_digits.lua).
-- @include b62_digits

local B62 = {[0] = '0'}
local B62_BYTE = {}
for i = 1, 62 do B62_BYTE[i - 1] = string.byte(B62_DIGITS, i) end

-- Digits into a buffer and one string at the end: a worker script formats a time for every job
-- it records, and a string per digit would cost more than the rest of the record's writing.
local b62_buf = {}
local function b62(n)
  local s = B62[n]
  if s then return s end
  local v = n
  if v < 0 then v = -v end
  v = v - v % 1
  local k = 0
  repeat
    local d = v % 62
    k = k + 1
    b62_buf[k] = B62_BYTE[d]
    v = (v - d) / 62
  until v < 1
  s = string.reverse(string.char(unpack(b62_buf, 1, k)))
  if n < 0 then s = '-' .. s end
  B62[n] = s
  return s
end

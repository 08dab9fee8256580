-- Include: int_text(n) — the decimal text of an integer (a time in ms, a count).

-- string.format costs ~1 µs a call and a batch formats the same few values (now, its lateness, a
-- marker's expiry) over and over: remember them.
local INT_TEXT = {}
local function int_text(n)
  local s = INT_TEXT[n]
  if not s then
    s = string.format('%d', n)
    INT_TEXT[n] = s
  end
  return s
end

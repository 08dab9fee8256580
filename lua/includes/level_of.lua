-- Include: level_of(stream) — the priority level a queue stream's name ends with (q#high ->
-- 'high'), nil for normal.

local function level_of(stream)
  return string.match(stream, '#(%a+)$')
end

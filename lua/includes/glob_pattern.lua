-- Include: glob_pattern(glob) — the Lua pattern of a key pattern where '*' matches any text and
-- every other character is itself (an operator's override for `customer:*`).

local function glob_pattern(glob)
  local lp = (string.gsub(glob, '[%^%$%(%)%%%.%[%]%+%-%?]', '%%%0'))
  return '^' .. (string.gsub(lp, '%*', '.*')) .. '$'
end

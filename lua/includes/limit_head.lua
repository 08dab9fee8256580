-- Include: limit_head(L, key) — the first job waiting on a limit key (its member of L.waiting:
-- key NUL order NUL execution id), or nil.
-- @include rcall

local function limit_head(L, key)
  return rcall('ZRANGEBYLEX', L.waiting, '[' .. key .. '\0', '(' .. key .. '\1', 'LIMIT', 0, 1)[1]
end

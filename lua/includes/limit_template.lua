-- Include: limit_template(L, key) — the template a held key was declared with (the label of
-- its counts), from L.keys ('template NUL concurrency NUL count NUL ms'), or nil.
-- @include rcall

local function limit_template(L, key)
  local decl = rcall('HGET', L.keys, key)
  if not decl then return nil end
  return string.match(decl, '^([^%z]*)')
end

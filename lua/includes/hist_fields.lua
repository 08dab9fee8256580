-- Include: hist_fields(...) — the fields of a history record's token: ',' .. each argument
-- (nil/false = empty), trailing empty fields left out.

local function hist_fields(...)
  local n = select('#', ...)
  local args = {...}
  while n > 0 and (args[n] == nil or args[n] == false or args[n] == '') do n = n - 1 end
  local out = ''
  for i = 1, n do
    local v = args[i]
    if v == nil or v == false then v = '' end
    out = out .. ',' .. v
  end
  return out
end

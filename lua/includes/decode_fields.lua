-- Include: decode_fields(text) — a job's fields from a JSON list [field, value, …] (delayed
-- members, dead letters), or nil unless it is a non-empty flat list of strings, so XADD can
-- never fail half-way.

local function decode_fields(text)
  local ok, f = pcall(cjson.decode, text)
  if not ok or type(f) ~= 'table' or #f == 0 or #f % 2 ~= 0 or #f > 200 then return nil end
  for i = 1, #f do
    if type(f[i]) ~= 'string' then return nil end
  end
  return f
end

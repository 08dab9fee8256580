-- Include: audit_value(v) — a stored value as an audit record keeps it: as it is up to 64
-- characters, else '#<first 12 hex of its SHA-1> <length>B' (a payload must not make a record
-- large; the digest still tells two values apart). nil stays nil (absent on that side).

local function audit_value(v)
  if v == nil or v == false then return cjson.null end
  if #v <= 64 then return v end
  return '#' .. string.sub(redis.sha1hex(v), 1, 12) .. ' ' .. #v .. 'B'
end

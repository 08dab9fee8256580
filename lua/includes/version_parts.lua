-- Include: version_parts(version) — a schedule hash's "version" field, "<generation>:<created_at>",
-- as the generation (a number) and the creation time (a string of ms); nil when the field is
-- absent or malformed.

local function version_parts(version)
  local gen, created = string.match(version or '', '^(%d+):(%d+)$')
  if not gen then return nil end
  return tonumber(gen), created
end

-- Include: pcall_read(...) — a read that doubles as the type check of its key: its reply, or nil
-- when the key holds another type.
-- @include wrong_type

local function pcall_read(...)
  local reply = redis.pcall(...)
  if wrong_type(reply) then return nil end
  return reply
end

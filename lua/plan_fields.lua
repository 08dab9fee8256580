--[[ plan_fields — read the fields the scheduler plans with (its plan of each schedule's spec,
rsched._core.fire_plan.PLAN_FIELDS), for a batch of schedules (read-only).

One JSON document for the whole batch instead of a whole HGETALL reply per schedule: the
scheduler parses one string (the payload, up to its size limit, never travels), which is what
lets it warm its cache for a large herd in the seconds before it comes due.

KEYS[i]  {p}:schedule:<id> of each schedule
ARGV     the field names to read, in order

Returns one JSON array with one entry per key: an array of the values (false where absent), ''
when the hash does not exist, or '!' when the key holds another type.
]]
-- @include rcall
-- @include pcall_read

local out = {}
for i = 1, #KEYS do
  -- The read is its own type check: one call a schedule, not a TYPE first.
  local values = pcall_read('HMGET', KEYS[i], unpack(ARGV))
  if not values then
    out[i] = '!'
  elseif values[1] == false and rcall('EXISTS', KEYS[i]) == 0 then
    out[i] = ''
  else
    out[i] = values
  end
end
if #out == 0 then return '[]' end  -- cjson would encode an empty table as {}
return cjson.encode(out)

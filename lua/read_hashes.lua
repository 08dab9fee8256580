--[[ read_hashes — whole schedule hashes, each with its next run, for readers (read-only):
Client.get, a page of Client.list, the schedules a schedules file's sync compares.

One JSON document for the batch: a hash came back as a reply of ~25 elements and its next run as
two more (from the index and from its parked bucket), each element parsed in Python: a page of 50
took the client ~6 ms of CPU, and a reader on a machine busy with a herd several times that.

KEYS[1]             schedules   ZSET {p}:schedules, scored by next run (ms; inf when none)
KEYS[2i], KEYS[2i+1]  per schedule of ARGV[i]: its hash {p}:schedule:<id> and its parked bucket
                    {p}:parked:<n>
ARGV[i]             the schedule's id, as in its keys

Returns one JSON array, an entry per schedule: '!' when its hash key holds another type; else
[fields, score]: the hash's field-value pairs as a flat array ({} when the hash does not exist:
cjson writes an empty table so), and its next run as Redis prints it, from the index or else
from its parked bucket, or false when neither holds it (or the key holds another type).
]]
-- @include pcall_read

local schedules_key = KEYS[1]
local out = {}
for i = 1, #ARGV do
  local id = ARGV[i]
  -- The read is its own type check: one call a schedule, not a TYPE first.
  local fields = pcall_read('HGETALL', KEYS[2 * i])
  if not fields then
    out[i] = '!'
  else
    local score = pcall_read('ZSCORE', schedules_key, id)
    if not score then score = pcall_read('ZSCORE', KEYS[2 * i + 1], id) end
    out[i] = {fields, score or false}
  end
end
if #out == 0 then return '[]' end  -- cjson would encode an empty table as {}
return cjson.encode(out)

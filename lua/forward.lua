--[[ forward — jobs holding limits that were read from another partition's stream are written
to partition 0's stream of the same queue and level, where every limit lives (docs/limits.md).

Each job is written once: its marker (one per execution id and attempt) is set with the write,
and a job whose marker is there is not written again, so a worker that died between this call
and the acknowledgement in the other partition (forwarded.lua) forwards nothing twice when the
entry is reclaimed there.

KEYS[1]      stream  {p0}:queue:<queue>[#level] (partition 0)
KEYS[2..]    one marker per item: {p0}:forwarded:<execution id>:<attempt>
ARGV[1]      how long a marker is kept (ms)
ARGV[2..]    one per item: the job's fields as a JSON list [field, value, …]

Returns how many jobs were written | {WRONG_TYPE=-6} the stream has another type |
{BAD_ARGS=-7} an item is not a JSON list of strings (nothing written).
]]
-- @include codes
-- @include rcall
-- @include key_is
-- @include decode_fields

local stream, keep_ms = KEYS[1], tonumber(ARGV[1])
if not key_is(stream, 'stream') then return {WRONG_TYPE} end
local jobs = {}
for i = 2, #ARGV do
  jobs[i - 1] = decode_fields(ARGV[i])
  if not jobs[i - 1] then return {BAD_ARGS} end
end
local written = 0
for i, fields in ipairs(jobs) do
  if rcall('SET', KEYS[1 + i], '1', 'NX', 'PX', keep_ms) then
    rcall('XADD', stream, '*', unpack(fields))
    written = written + 1
  end
end
return written

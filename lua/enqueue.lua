--[[ enqueue — add one job to a queue now, or to the queue's delayed set when it has a delay.

Guarantees: the job is written whole or not at all; a call re-sent after a lost reply returns
the first result without writing twice (operation key). scheduled_at is the Redis time the job
becomes due and fired_at the Redis time of the call.

KEYS[1] stream   {p}:queue:<queue>
KEYS[2] delayed  {p}:delayed:<queue>
KEYS[3] queues   SET of queue names
KEYS[4] op       {p}:ops:<minute> (replay protection)
ARGV[1] queue      queue name (added to the queues set)
ARGV[2] delay_ms   0 = ready now
ARGV[3] op_id    request id of this call
ARGV[4..] fields   field, value, … of the job (without scheduled_at / fired_at)

Returns {QUEUED=6, entry id} | {DELAYED=7, due ms} | {WRONG_TYPE=-6} a key has the wrong type.
]]
-- @include common

local stream, delayed, queues, op_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local queue, delay, op_id = ARGV[1], tonumber(ARGV[2]), ARGV[3]

local replay = op_replay(op_key, op_id)
if replay then return replay end
if not (key_is(stream, 'stream') and key_is(delayed, 'zset') and key_is(queues, 'set')) then
  return {-6}  -- WRONG_TYPE
end

local now = now_ms()
local due = now + math.max(0, math.floor(delay))
local fields = {}
for i = 4, #ARGV do fields[#fields + 1] = ARGV[i] end
fields[#fields + 1] = 'scheduled_at'
fields[#fields + 1] = int_text(due)
fields[#fields + 1] = 'fired_at'
fields[#fields + 1] = int_text(now)

rcall('SADD', queues, queue)
local result
if due > now then
  rcall('ZADD', delayed, due, cjson.encode(fields))
  result = {7, int_text(due)}  -- DELAYED
else
  result = {6, rcall('XADD', stream, '*', unpack(fields))}  -- QUEUED
end
return op_store(op_key, op_id, result)

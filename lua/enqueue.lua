--[[ enqueue — add one job to a queue now, or to the queue's delayed set when it has a delay.

Guarantees: the job is written whole or not at all; a call re-sent after a lost reply returns
the first result without writing twice (operation key). scheduled_at is the Redis time the job
becomes due and fired_at the Redis time of the call. With a dedup key (a caller's own execution
id), the check and the claim of the id are in the same step as the write: of two concurrent
calls with one id, exactly one writes a job.

KEYS[1] stream   {p}:queue:<queue> (or its priority level's stream, {p}:queue:<queue>#high)
KEYS[2] delayed  {p}:delayed:<queue>
KEYS[3] queues   SET of queue names
KEYS[4] op       {p}:ops:<minute> (replay protection)
KEYS[5] dedup    optional: {p}:dedup:<execution id>; the job's fields then carry 'dedup' = the
                 window in ms that the key outlives the job's end (the key holds it, so that
                 complete / dead can re-arm the TTL without being told)
ARGV[1] queue      queue name (added to the queues set)
ARGV[2] delay_ms   0 = ready now
ARGV[3] op_id    request id of this call
ARGV[4..] fields   field, value, … of the job (without scheduled_at / fired_at)

Returns {QUEUED=6, entry id} | {DELAYED=7, due ms} | {EXISTS=-9} the execution id is taken (a
job with it waits, runs or finished less than its window ago: nothing written) |
{WRONG_TYPE=-6} a key has the wrong type | {BAD_ARGS=-7} a dedup key without a 'dedup' field.
]]
-- @include codes
-- @include rcall
-- @include int_text
-- @include key_is
-- @include now_ms
-- @include op_replay
-- @include op_store

local stream, delayed, queues, op_key, dedup = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local queue, delay, op_id = ARGV[1], tonumber(ARGV[2]), ARGV[3]
-- Longest a taken id is kept before its job ends (a backlog or retries that never end must not
-- keep it forever); complete and dead set the window from the end.
local DEDUP_WAIT_MAX_MS = 7 * 86400000

local replay = op_replay(op_key, op_id)
if replay then return replay end
if not (key_is(stream, 'stream') and key_is(delayed, 'zset') and key_is(queues, 'set')) then
  return {WRONG_TYPE}
end
local window = nil
if dedup then
  if not key_is(dedup, 'string') then return {WRONG_TYPE} end
  if rcall('EXISTS', dedup) == 1 then return {EXISTS} end
  for i = 4, #ARGV - 1, 2 do
    if ARGV[i] == 'dedup' then window = math.max(0, math.floor(tonumber(ARGV[i + 1]) or 0)) end
  end
  if not window then return {BAD_ARGS} end
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
if window then
  rcall('SET', dedup, int_text(window), 'PX', due - now + window + DEDUP_WAIT_MAX_MS)
end
local result
if due > now then
  rcall('ZADD', delayed, due, cjson.encode(fields))
  result = {DELAYED, int_text(due)}
else
  result = {QUEUED, rcall('XADD', stream, '*', unpack(fields))}
end
return op_store(op_key, op_id, result)

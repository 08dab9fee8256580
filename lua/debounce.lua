--[[ debounce — one call of a debounced enqueue: open a debounce window with a new job in the
queue's delayed set, or join the open one, whose job then takes this call's fields and falls due
later.

Guarantees: of the calls with one debounce key on one queue while its window is open, one job
runs, with the last call's fields, debounce_ms after the last call (Redis time: each call moves
the due time to now + debounce_ms). The window is open while its job is in the delayed set; once
the promoter (promote.lua) moved it to the stream, or it was cancelled, the next call opens a new
window with a new job. Every call of a window answers with the window's execution id. The
window key names the job's member, so a call finds it with one GET and one ZSCORE. A call re-sent
after a lost reply returns the first result without writing twice (operation key).

KEYS[1] delayed  {p}:delayed:<queue>
KEYS[2] queues   SET of queue names
KEYS[3] op       {p}:ops:<minute> (replay protection)
KEYS[4] window   {p}:debounce:<queue>#<key>: STRING, the member of the window's job in delayed
ARGV[1] queue         queue name (added to the queues set)
ARGV[2] debounce_ms   > 0
ARGV[3] op_id         request id of this call
ARGV[4] execution id  of the job, should this call open a window
ARGV[5..] fields      field, value, … of the job (without execution_id, scheduled_at, fired_at)

Returns {DELAYED=7, due ms, execution id} a new window opened |
{DEBOUNCED=9, due ms, execution id} the open window's job took this call's fields and due time |
{WRONG_TYPE=-6} a key has the wrong type | {BAD_ARGS=-7} no debounce_ms > 0, or fields that do
not pair up (nothing written).
]]
-- @include codes
-- @include rcall
-- @include int_text
-- @include key_is
-- @include now_ms
-- @include op_replay
-- @include op_store

local delayed, queues, op_key, window = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local queue, debounce, op_id, new_exec = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
-- How long the window key outlives its job's due time: a call in that time while the job is
-- still delayed (no promoter ran: workers down) joins the window instead of adding a second job.
local GRACE_MS = 300000

local replay = op_replay(op_key, op_id)
if replay then return replay end
if not debounce or debounce <= 0 or not new_exec or #ARGV % 2 ~= 0 then return {BAD_ARGS} end
if not (key_is(delayed, 'zset') and key_is(queues, 'set') and key_is(window, 'string')) then
  return {WRONG_TYPE}
end

-- The open window: its member still in the delayed set (written by this script, so the list's
-- first pair is its execution id).
local code, exec = DELAYED, new_exec
local member = rcall('GET', window)
if member and rcall('ZSCORE', delayed, member) then
  local ok, old = pcall(cjson.decode, member)
  if ok and type(old) == 'table' and old[1] == 'execution_id' and type(old[2]) == 'string' then
    code, exec = DEBOUNCED, old[2]
  end
end

local now = now_ms()
local due = now + math.floor(debounce)
local fields = {'execution_id', exec}
for i = 5, #ARGV do fields[#fields + 1] = ARGV[i] end
fields[#fields + 1] = 'scheduled_at'
fields[#fields + 1] = int_text(due)
fields[#fields + 1] = 'fired_at'
fields[#fields + 1] = int_text(now)
local job = cjson.encode(fields)

if code == DEBOUNCED then rcall('ZREM', delayed, member) end
rcall('ZADD', delayed, due, job)
rcall('SET', window, job, 'PX', due - now + GRACE_MS)
rcall('SADD', queues, queue)
return op_store(op_key, op_id, {code, int_text(due), exec})

--[[ flow_start — a worker is about to run a batch of flow steps' jobs it read.

For each item: while its flow runs, the step is marked running (its attempt kept) and the job
runs (OK). When the flow ended meanwhile (failed, cancelled: a step released before that), the
job is acknowledged, deleted from the stream and its step recorded cancelled
(lua/includes/flow_end.lua): it must not run (FLOW_OVER). A flow that is gone (expired, or never
written: a hand-made entry) does not stop its job, nor does a step that ended (its dead letter
requeued by an operator: it runs, and its end changes nothing in the flow). Running it twice
marks "running" twice and
cancels once (the entry is no longer pending the second time: NOT_PENDING, do not run).

KEYS[1] stream  {p}:queue:<queue>[#level]
KEYS[2..] the items' flows {p}:flow:<flow id> (each named once), and the streams of their
          steps' children (flow_next) for a cancelled step's end
ARGV[1] group
then 4 args per item: entry id, flow id, step number, attempt

Returns one code per item: OK=5 run it | FLOW_OVER=-16 its flow ended: recorded cancelled, do
not run | NOT_PENDING=-10 no longer pending (do not run).
]]
-- @include codes
-- @include rcall
-- @include now_ms
-- @include flow_end

local stream, group = KEYS[1], ARGV[1]
local now = now_ms()
local out = {}
for i = 2, #ARGV - 3, 4 do
  local id, fid, n, attempt = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local _, fkey = flow_key(stream, fid)
  local state = fkey and rcall('HGET', fkey, 'state')
  local code = OK
  local s = state and rcall('HGET', fkey, n .. '.s')
  if s and FLOW_ENDED[s] then
    state = nil  -- a job of a step that ended (a requeued dead letter): it runs, as asked
  end
  if state and state ~= 'running' and state ~= 'creating' then
    if rcall('XACK', stream, group, id) == 1 then
      rcall('XDEL', stream, id)
      flow_end(stream, fid, n, 'x', attempt, '', now)
      code = FLOW_OVER
    else
      code = NOT_PENDING
    end
  elseif state then
    if s == 'q' or s == 'r' then
      rcall('HSET', fkey, n .. '.s', 'r', n .. '.a', attempt, 'at', int_text(now))
    end
  end
  out[#out + 1] = code
end
return out

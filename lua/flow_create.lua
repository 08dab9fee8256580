--[[ flow_create — write a flow's steps, a call per ~1,000 of them; the last call starts it.

Each call is atomic. The first writes the flow's meta fields (state 'creating', an hour's
expiry: a creation abandoned halfway leaves nothing behind for long); every call writes its
steps' definitions and how many parents each waits for; the last one makes the flow 'running',
indexes it and releases its roots (lua/includes/flow_release.lua), so no step runs before the
whole flow is written. A call re-sent after a lost reply writes the same fields again; the last
call, re-sent, finds the flow running and releases nothing twice. A flow id is taken by the
first call of one creation (its token); another creation with that id gets EXISTS.

KEYS[1] flow      {p}:flow:<flow id>
KEYS[2] flows     {p}:flows (ZSET of the partition's flows by creation time, ms)
KEYS[3] queues    {p}:queues (SET of queue names: the flow's queues are added)
KEYS[4..] the streams of the flow's root steps ({p}:queue:<queue>[#level]; last call only)
ARGV[1] flow id
ARGV[2] token     the creation's random id (the same in each of its calls)
ARGV[3] first     '1' = the first call: ARGV[5] is the meta, a JSON object {n, ttl, queues,
                  queue, labels, tp, sid, lane, hcap} (steps, expiry after the end in ms, queue
                  names, the queue of the steps whose definition names none, labels text,
                  traceparent; for a flow a schedule's occurrence started, its
                  schedule id, the stream name of its starter job and the history's cap:
                  flow_end.lua ends that run when the flow ends; '' when none)
ARGV[4] roots     '' = not the last call; the last call: the root steps' numbers, "1,2"
ARGV[5] meta (first call) or ''
ARGV[6..] per step: number, definition (rsched._core.flows.PlannedStep.encode), parents count
          (kept, as the step's field <n>.w, only for a step of several parents: one of one
          parent is released when that parent ends, flow_release.lua)

Returns {OK=5, roots released} | {EXISTS=-9} the flow id is taken (another creation or a flow)
| {NOT_FOUND=-2} a later call found no flow being created (the first call's hour passed) |
{WRONG_TYPE=-6} a key of another type | {BAD_ARGS=-7} the meta is not a JSON object.
]]
-- @include codes
-- @include rcall
-- @include int_text
-- @include key_is
-- @include now_ms
-- @include flow_release

local fkey, flows, queues = KEYS[1], KEYS[2], KEYS[3]
local fid, token, first, roots = ARGV[1], ARGV[2], ARGV[3] == '1', ARGV[4]
local CREATING_TTL_MS = 3600000

if not (key_is(fkey, 'hash') and key_is(flows, 'zset') and key_is(queues, 'set')) then
  return {WRONG_TYPE}
end
local now = now_ms()
local got = rcall('HMGET', fkey, 'state', 'token')
if got[1] and got[2] ~= token then return {EXISTS} end
if got[1] == 'running' or (got[1] and got[1] ~= 'creating') then
  return {OK, 0}  -- this creation's last call, re-sent: started already
end
if first then
  local ok, meta = pcall(cjson.decode, ARGV[5])
  if not ok or type(meta) ~= 'table' then return {BAD_ARGS} end
  rcall('HSET', fkey, 'state', 'creating', 'token', token, 'created', int_text(now),
        'n', meta.n, 'left', meta.n, 'ttl', meta.ttl)
  for _, name in ipairs({'queue', 'labels', 'tp', 'sid', 'lane', 'hcap'}) do
    if meta[name] and meta[name] ~= '' then rcall('HSET', fkey, name, meta[name]) end
  end
  if type(meta.queues) == 'table' and #meta.queues > 0 then
    rcall('SADD', queues, unpack(meta.queues))
  end
  rcall('PEXPIRE', fkey, CREATING_TTL_MS)
elseif not got[1] then
  return {NOT_FOUND}
end
for i = 6, #ARGV - 2, 3 do
  rcall('HSET', fkey, ARGV[i], ARGV[i + 1])
  if tonumber(ARGV[i + 2]) > 1 then rcall('HSET', fkey, ARGV[i] .. '.w', ARGV[i + 2]) end
end
if roots == '' then return {OK, 0} end
rcall('HSET', fkey, 'state', 'running')
rcall('PERSIST', fkey)
-- Scored by creation time, with the flows of one millisecond told apart in the order they
-- started (+0.001 each): a listing pages by score alone.
local created = tonumber(rcall('HGET', fkey, 'created')) or now
local same = math.min(rcall('ZCOUNT', flows, created, '(' .. int_text(created + 1)), 999)
rcall('ZADD', flows, string.format('%d.%03d', created, same), fid)
local tag = string.match(KEYS[4] or '', '^(.-}):queue:') or ''
local released = 0
for r in string.gmatch(roots, '%d+') do
  flow_release(fkey, tag, fid, r, now)
  released = released + 1
end
return {OK, released}

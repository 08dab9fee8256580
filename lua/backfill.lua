--[[ backfill — fire past occurrences of a schedule (a range the client computed), each at most
once, in the same job format as a regular fire (origin 'backfill'). Every occurrence runs: with
overlap=allow all are queued at once; under any other policy they run one after another,
oldest first, the first now (or, when the schedule has a run in progress, behind it) and each
of the others released when the run before it ends (the schedule's pending set,
pending_push.lua).

Idempotent by execution id ("<id>@<scheduled ms>"): an occurrence whose execution id is in the
backfilled set, or appears as fired/buffered in the schedule's history, is not fired again.
Backfilled runs do not move next_run, last_run or runs: they fill the past, the schedule's
future is unchanged. Every argument is checked before the first write. A schedule with a
debounce collapses them as it collapses any pile-up: the first opens its debounce window (or
joins the open one) and each of the others joins it, so one job runs, a debounce after the call
(fire_job.lua).

KEYS[1] hash        {p}:schedule:<id>
KEYS[2] history     {p}:history:<id>
KEYS[3] pending     {p}:pending:<id>
KEYS[4] stream      {p}:queue:<queue of the schedule>
KEYS[5] backfilled  {p}:backfilled:<id>  SET of execution ids fired by backfills
KEYS[6] op          {p}:ops:<minute> (replay protection)
KEYS[7] backlogs    {p}:backlogs
KEYS[8] delayed     {p}:delayed:<queue of the schedule> (a schedule with a debounce)
KEYS[9] audit       {p}:audit (docs/audit.md)
ARGV[1] id
ARGV[2] generation  the generation the client computed the occurrences from
ARGV[3] cap         history length cap
ARGV[4] cancel      pub/sub channel for cancel_previous
ARGV[5] op_id       request id of this call
ARGV[6] audit       who and from where (lua/includes/audit_ctx.lua)
ARGV[7] traceparent the W3C traceparent every job of the call carries, the client's producer
                    span ("00-<trace id>-<span id>-<flags>", lowercase hex; '': none, a client
                    that does not trace)
ARGV[8..] sched     occurrences to fire (ms), oldest first

Appends one record to the audit trail when it fires anything (action backfill; its note: the
occurrences asked for, first and last, and how many were fired).

Returns {OK=5, code, code, …} with one code per occurrence: FIRED=1, BUFFERED=3 (pending
behind the schedule's unfinished run), DEBOUNCED=9 (merged into the schedule's debounce
window), STALE=0 already fired before (nothing done);
{NOT_FOUND=-2} | {CONFLICT=-3, generation} the spec changed since the client read it (nothing
done) | {NOT_DUE=-5} an occurrence is in the future by Redis TIME (nothing done) |
{WRONG_TYPE=-6} a key has the wrong type or the schedule's stored fields are unusable (edited by
hand; nothing done) | {BAD_ARGS=-7} the audit argument or the traceparent is malformed (nothing
done)
]]
-- @include codes
-- @include rcall
-- @include key_is
-- @include now_ms
-- @include int_text
-- @include num62
-- @include version_parts
-- @include op_replay
-- @include op_store
-- @include job_fields
-- @include hash_plan
-- @include job_state
-- @include marker_pairs
-- @include fire_job
-- @include audit_ctx
-- @include audit
-- @include traceparent

local hash, history, pending, stream = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local backfilled_key, op_key, backlogs_key, delayed = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local sid, generation, cap, cancel_channel = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
local op_id = ARGV[5]
local tp = traceparent(ARGV[7])
local FIRST = 8

if tp == false then return {BAD_ARGS} end
local replay = op_replay(op_key, op_id)
if replay then return replay end
if not (key_is(hash, 'hash') and key_is(history, 'list') and key_is(pending, 'zset')
        and key_is(stream, 'stream') and key_is(backfilled_key, 'set')
        and key_is(backlogs_key, 'zset') and key_is(delayed, 'zset')) then
  return {WRONG_TYPE}
end
local ctx, refused = audit_ctx(KEYS[9], ARGV[6])
if not ctx then return {refused} end
local f = job_fields(hash)
if not f[F_VERSION] then return {NOT_FOUND} end
local cur = version_parts(f[F_VERSION]) or 0
if tostring(cur) ~= generation then return {CONFLICT, cur} end
local p = hash_plan(f)
local _, gen = job_state(f)
if not p or not gen then return {WRONG_TYPE} end
p.delayed = delayed
local now = now_ms()
for i = FIRST, #ARGV do
  if tonumber(ARGV[i]) > now then return {NOT_DUE} end
end
local shared = {now = now, cap = cap, cancel = cancel_channel, backlogs = backlogs_key}

-- Occurrences the regular schedule (or an earlier backfill) already turned into a job: their
-- history records (rec_first.lua) show them fired (f) or buffered (b).
local done = {}
for _, entry in ipairs(rcall('LRANGE', history, 0, -1)) do
  local sched = string.match(entry, '^(%-?%w+)|')
  if sched and string.find(entry, '|[fb]') then
    done[sid .. '@' .. int_text(num62(sched))] = true
  end
end

local out = {OK}
local fired = 0
for i = FIRST, #ARGV do
  local sched = ARGV[i]
  local exec = sid .. '@' .. sched
  local code = STALE
  if not done[exec] and rcall('SISMEMBER', backfilled_key, exec) == 0 then
    local run, run_until
    code, run, run_until = fire_job(shared, hash, history, pending, stream, sid, sched, 'backfill',
                                    nil, f, gen, p, true, nil, tp)
    if code == FIRED or code == BUFFERED or code == DEBOUNCED then
      rcall('SADD', backfilled_key, exec)
      fired = fired + 1
    end
    if run_until then
      rcall('HSET', hash, marker_pairs(run, run_until))
      -- The next occurrence of this backfill sees the run it just queued (or moved).
      f[F_RUN], f[F_RUN_UNTIL] = run, run_until
    end
  end
  out[#out + 1] = code
end
if fired > 0 then
  audit(ctx, 'backfill', sid, cur, cur, nil, (#ARGV - FIRST + 1) .. ' occurrences ' ..
        ARGV[FIRST] .. '..' .. ARGV[#ARGV] .. ', ' .. fired .. ' fired')
end
return op_store(op_key, op_id, out)

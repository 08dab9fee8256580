--[[ resume — let a paused schedule fire again from its next occurrence after now, its count of
failed runs in a row (failure_streak.lua) back at 0.

KEYS[1] schedules  KEYS[2] hash  KEYS[3] op  KEYS[4] parked bucket ({p}:parked:<n>, see park.lua)
KEYS[5] parked ({p}:parked)
KEYS[6] audit       {p}:audit (docs/audit.md)
ARGV[1] id
ARGV[2] expect_gen  generation the client computed next_ms from
ARGV[3] next_ms     next occurrence after now (client, from Redis TIME), '' when none is left
ARGV[4] wake        pub/sub channel for the scheduler
ARGV[5] op_id       request id of this call
ARGV[6] audit       who and from where (lua/includes/audit_ctx.lua)

Appends one record to the audit trail when it resumes a paused schedule (action resume: its
status and pause note before and after); a schedule that was not paused records nothing.

Returns {OK=5} resumed (or was not paused) | {NOT_FOUND=-2} | {CONFLICT=-3, generation} spec
changed since the client read it (read again and retry) | {COMPLETED=-4} | {WRONG_TYPE=-6} a key
has the wrong type | {BAD_ARGS=-7} next_ms is not a number, or the audit argument is malformed
]]
-- @include codes
-- @include rcall
-- @include int_text
-- @include key_is
-- @include now_ms
-- @include version_parts
-- @include op_replay
-- @include op_store
-- @include unpark_one
-- @include audit_ctx
-- @include audit

local replay = op_replay(KEYS[3], ARGV[5])
if replay then return replay end
if not (key_is(KEYS[1], 'zset') and key_is(KEYS[2], 'hash') and key_is(KEYS[4], 'zset')
        and key_is(KEYS[5], 'zset')) then
  return {WRONG_TYPE}
end
if not (ARGV[3] == '' or tonumber(ARGV[3])) then return {BAD_ARGS} end
local ctx, refused = audit_ctx(KEYS[6], ARGV[6])
if not ctx then return {refused} end
local st = rcall('HMGET', KEYS[2], 'version', 'status', 'pause_note')
if not st[1] then return {NOT_FOUND} end
local gen = version_parts(st[1]) or 0
if tostring(gen) ~= ARGV[2] then return {CONFLICT, gen} end
if st[2] == 'completed' then return {COMPLETED} end
if st[2] ~= 'paused' then return op_store(KEYS[3], ARGV[5], {OK}) end
local changes = {status = {'paused', ARGV[3] == '' and 'completed' or cjson.null}}
if st[3] then changes.pause_note = {st[3], cjson.null} end
audit(ctx, 'resume', ARGV[1], gen, gen, changes)
rcall('HDEL', KEYS[2], 'pause_note', 'status', 'consecutive_failures', 'failures_last')
rcall('HSET', KEYS[2], 'updated_at', int_text(now_ms()))
unpark_one(KEYS[4], KEYS[5], ARGV[1])
if ARGV[3] == '' then
  rcall('HSET', KEYS[2], 'status', 'completed')
  rcall('ZADD', KEYS[1], 'inf', ARGV[1])
else
  rcall('ZADD', KEYS[1], ARGV[3], ARGV[1])
  rcall('PUBLISH', ARGV[4], ARGV[3])
end
return op_store(KEYS[3], ARGV[5], {OK})

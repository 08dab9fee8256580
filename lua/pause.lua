--[[ pause — stop a schedule from firing until it is resumed. Occurrences that come due while
paused are not misfires: resume starts again from the next occurrence after resuming.

KEYS[1] schedules  KEYS[2] hash  KEYS[3] op  KEYS[4] its parked bucket ({p}:parked:<n>, see
park.lua)  KEYS[5] parked ({p}:parked)  KEYS[6] audit ({p}:audit, docs/audit.md)
ARGV[1] id         ARGV[2] note ('' for none)   ARGV[3] op_id (request id)
ARGV[4] park_after_ms as upsert.lua's: a paused schedule (at +inf) goes to its parked bucket
                   unless it is '' (never park)
ARGV[5] audit      who and from where (lua/includes/audit_ctx.lua)

Appends one record to the audit trail: action pause, the status and pause note before and
after (none when it was paused with that note already).

Returns {OK=5} paused (or already paused) | {NOT_FOUND=-2} | {COMPLETED=-4} (cannot pause) |
{WRONG_TYPE=-6} a key has the wrong type | {BAD_ARGS=-7} the audit argument is malformed
]]
-- @include codes
-- @include rcall
-- @include int_text
-- @include key_is
-- @include now_ms
-- @include op_replay
-- @include op_store
-- @include place
-- @include audit_ctx
-- @include audit
-- @include version_parts

local replay = op_replay(KEYS[3], ARGV[3])
if replay then return replay end
if not (key_is(KEYS[1], 'zset') and key_is(KEYS[2], 'hash') and key_is(KEYS[4], 'zset')
        and key_is(KEYS[5], 'zset')) then
  return {WRONG_TYPE}
end
local ctx, refused = audit_ctx(KEYS[6], ARGV[5])
if not ctx then return {refused} end
local status = rcall('HMGET', KEYS[2], 'version', 'status', 'pause_note')
if not status[1] then return {NOT_FOUND} end
if status[2] == 'completed' then return {COMPLETED} end
local note = ARGV[2] ~= '' and ARGV[2] or false
local changes = {}
if status[2] ~= 'paused' then changes.status = {status[2] or cjson.null, 'paused'} end
if status[3] ~= note then changes.pause_note = {status[3] or cjson.null, note or cjson.null} end
local gen = version_parts(status[1])
audit(ctx, 'pause', ARGV[1], gen, gen, changes)
rcall('HSET', KEYS[2], 'status', 'paused', 'updated_at', int_text(now_ms()))
if ARGV[2] ~= '' then rcall('HSET', KEYS[2], 'pause_note', ARGV[2])
else rcall('HDEL', KEYS[2], 'pause_note') end
local park_after = tonumber(ARGV[4])
place(KEYS[1], KEYS[4], KEYS[5], ARGV[1], 'inf', park_after and now_ms() + park_after)
return op_store(KEYS[3], ARGV[3], {OK})

--[[ remove — delete a schedule, its history, its pending occurrences (none of them runs) and its
backfill bookkeeping.

A fire call that read the schedule before this finds it gone and fires nothing. A run already
queued or running is not touched (its job entry stays in the queue stream); when it ends, the
worker scripts record it in the runs log only, and bring back none of the schedule's keys.

KEYS[1] schedules  KEYS[2] hash  KEYS[3] history  KEYS[4] pending  KEYS[5] op
KEYS[6] parked bucket ({p}:parked:<n>, see park.lua)  KEYS[7] parked ({p}:parked)
KEYS[8] backfilled ({p}:backfilled:<id>, the execution ids backfills fired)
KEYS[9] audit ({p}:audit, docs/audit.md)  KEYS[10] specs ({p}:specs:<id>, its spec history:
removed with it)
KEYS[11..] labels  {p}:label:<k>=<v>, the label index keys of its labels (label_index.lua)
ARGV[1] id         ARGV[2] op_id (request id)
ARGV[3] audit      who and from where (lua/includes/audit_ctx.lua)
ARGV[4] labels     its labels field as the caller read it ('' or absent for none)

Appends one record to the audit trail (action remove, the generation removed); the audit
trail keeps it, and the schedule's earlier records, for its retention.

Returns {OK=5} removed | {NOT_FOUND=-2} | {LABELS_MOVED=-15} its labels are not ARGV[4] (read
them again) | {WRONG_TYPE=-6} a key has the wrong type (nothing removed) | {BAD_ARGS=-7} the
audit argument is malformed (nothing removed)
]]
-- @include codes
-- @include rcall
-- @include key_is
-- @include op_replay
-- @include op_store
-- @include unpark_one
-- @include audit_ctx
-- @include audit
-- @include version_parts
-- @include label_index

local replay = op_replay(KEYS[5], ARGV[2])
if replay then return replay end
if not (key_is(KEYS[1], 'zset') and key_is(KEYS[2], 'hash') and key_is(KEYS[6], 'zset')
        and key_is(KEYS[7], 'zset')) then
  return {WRONG_TYPE}
end
local ctx, refused = audit_ctx(KEYS[9], ARGV[3])
if not ctx then return {refused} end
if rcall('EXISTS', KEYS[2]) == 0 then return {NOT_FOUND} end
if (rcall('HGET', KEYS[2], 'labels') or '') ~= (ARGV[4] or '') then return {LABELS_MOVED} end
if not label_index(ARGV[1], {unpack(KEYS, 11)}, {}) then return {WRONG_TYPE} end
audit(ctx, 'remove', ARGV[1], (version_parts(rcall('HGET', KEYS[2], 'version'))))
rcall('DEL', KEYS[2], KEYS[3], KEYS[4], KEYS[10])
if KEYS[8] then rcall('DEL', KEYS[8]) end
rcall('ZREM', KEYS[1], ARGV[1])
unpark_one(KEYS[6], KEYS[7], ARGV[1])
-- {p}:backlogs may keep the id until the scheduler's sweep finds its pending set gone.
return op_store(KEYS[5], ARGV[2], {OK})

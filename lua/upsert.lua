--[[ upsert — create or replace a schedule's spec; every write bumps its generation.

The spec fields replace the old ones whole (absent = default); engine state (creation time,
runs, last_run, the run marker) is kept. The pending occurrences of the old spec (held back by
buffer_one / buffer_all, or caught-up and backfilled runs waiting their turn) are dropped, so
the old spec never fires. The hash's "version" field is "<generation>:<created_at>" (ms): what
fire.lua compares, one field where two would cost 16 bytes more a schedule.

KEYS[1] schedules  ZSET of schedules by next run
KEYS[2] hash       {p}:schedule:<id>
KEYS[3] pending    {p}:pending:<id>
KEYS[4] queues     SET of queue names
KEYS[5] op         {p}:ops:<minute> (replay protection)
KEYS[6] bucket     {p}:parked:<n>, the schedule's parked bucket (see park.lua)
KEYS[7] parked     {p}:parked
KEYS[8] audit      {p}:audit, the audit trail (docs/audit.md)
KEYS[9] specs      {p}:specs:<id>, the schedule's spec history
KEYS[10..] labels  {p}:label:<k>=<v>: the index keys of the labels stored now (ARGV[13] of
                   them), then of the new spec's (ARGV[14]) (lua/includes/label_index.lua)
ARGV[1] id
ARGV[2] mode       'add' (fail if it exists) | 'upsert' | 'replace' (fail if it does not exist)
ARGV[3] expect_gen generation the caller read ('0' = must not exist yet), or '' for any
ARGV[4] next_ms    first run computed by the client from Redis TIME, or '' when none is left
ARGV[5] paused     '1' or '0'
ARGV[6] queue      queue name (for the queues set)
ARGV[7] wake       pub/sub channel told when the schedule is due earlier than any before
ARGV[8] op_id      request id of this call
ARGV[9] created_ms creation time the client computed next_ms with (used for a new schedule)
ARGV[10] park_after_ms the entry goes to the schedule's parked bucket when its next run is later
                   than now + this (paused and completed ones too), else to the index; '' never
ARGV[11] audit     who and from where, the stream's cap, specs kept (lua/includes/audit_ctx.lua)
ARGV[12] labels    the schedule's labels field as the caller read it ('' for none)
ARGV[13] n_old     ARGV[14] n_new: how many of KEYS[10..] are old and new label keys
ARGV[15..] spec    field, value, field, value, … (non-default spec fields only)

Appends one record to the audit trail (lua/includes/spec_audit.lua: the fields that changed,
old and new) and, from the schedule's first change on, its new spec to its spec history.

Returns {OK=5, generation, created(0/1)} | {EXISTS=-9} (add) | {NOT_FOUND=-2} (replace) |
{LABELS_MOVED=-15} the stored labels are not ARGV[12] (read them again) |
{CONFLICT=-3, generation} the generation moved since the caller read it | {WRONG_TYPE=-6} a key
has the wrong type (or the stored generation/runs are not numbers) | {BAD_ARGS=-7} malformed
arguments (the audit argument included)
]]
-- @include codes
-- @include rcall
-- @include key_is
-- @include now_ms
-- @include op_replay
-- @include op_store
-- @include place
-- @include upsert_one
-- @include earlier_than_head
-- @include audit_ctx

local schedules_key, hash_key, pending_key, queues_key, op_key, bucket_key, parked_key = KEYS[1],
    KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local id, mode, expect_gen, next_ms, paused = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local queue, wake, op_id, created_ms = ARGV[6], ARGV[7], ARGV[8], ARGV[9]
local park_after = tonumber(ARGV[10])
local audit_key, specs_key = KEYS[8], KEYS[9]
local n_old, n_new = tonumber(ARGV[13]), tonumber(ARGV[14])

local replay = op_replay(op_key, op_id)
if replay then return replay end
if not (key_is(schedules_key, 'zset') and key_is(queues_key, 'set')
        and key_is(bucket_key, 'zset') and key_is(parked_key, 'zset')) then
  return {WRONG_TYPE}
end
if op_id == '' or not (n_old and n_new) or #KEYS ~= 9 + n_old + n_new then return {BAD_ARGS} end
local ctx, refused = audit_ctx(audit_key, ARGV[11])
if not ctx then return {refused} end

local head = rcall('ZRANGE', schedules_key, 0, 0, 'WITHSCORES')
local reply, score = upsert_one({
  hash = hash_key, pending = pending_key, mode = mode, expect_gen = expect_gen,
  next_ms = next_ms, paused = paused, created_ms = created_ms, args = ARGV, from = 15,
  to = #ARGV, id = id, audit = ctx, specs = specs_key,
  labels = {stored = ARGV[12], old = {unpack(KEYS, 10, 9 + n_old)},
            new = {unpack(KEYS, 10 + n_old, 9 + n_old + n_new)}},
})
if not score then return reply end  -- nothing written: nothing to remember for a replay
place(schedules_key, bucket_key, parked_key, id, score, park_after and now_ms() + park_after)
rcall('SADD', queues_key, queue)
if earlier_than_head(score, head) then rcall('PUBLISH', wake, score) end
return op_store(op_key, op_id, reply)

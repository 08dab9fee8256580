--[[ cancel — an operator cancels a job that waits: in its stream (not yet read by a worker) or
in its queue's delayed set (a retry or a delayed enqueue).

The job is removed and "cancelled" is recorded on its schedule's history (while the schedule
exists) and in the runs log, and the schedule's run ends (run marker, release of a pending
occurrence) as when a job completes; an enqueued job's dedup
window counts from now. A job a worker already read is not touched: RUNNING tells the caller
to cancel it on its worker. Running it twice cancels once (the second call finds nothing).

KEYS[1] stream   {p}:queue:<queue> (the job's level's stream)
KEYS[2] delayed  {p}:delayed:<queue>
KEYS[3] history  {p}:history:<id>    KEYS[4] hash {p}:schedule:<id>
KEYS[5] pending  {p}:pending:<id>    (KEYS[3..5] ignored when ARGV[7] is '0')
KEYS[6] dedup    {p}:dedup:<execution id> (optional: an enqueued job with its own id; any key
                 of another type, the stream, when there is none but KEYS[7] is given)
KEYS[7] runs     optional: the runs log {p}:runs, where the cancelled job is recorded
                 (run_log.lua) with ARGV[9] (its cap) and ARGV[10] (the record)
KEYS[8] activity optional, with KEYS[7]: the partition's activity counters {p}:activity
                 (activity.lua: counts the cancelled job)
KEYS[9..] with KEYS[8]: the runs log's label index keys of the record's labels
                 (runs_log.run_index_keys, run_index.lua; none for a job without labels)
ARGV[1] group
ARGV[2] where    'stream' | 'delayed'
ARGV[3] entry    the stream entry id, or the delayed set's member (the job's JSON fields)
ARGV[4] execution id   ARGV[5] attempt   ARGV[6] history cap
ARGV[7] has history    '1' | '0'
ARGV[8] extra    JSON fragment for the history event ('' or ',…')
ARGV[9] runs log cap   ARGV[10] the record (JSON array; with KEYS[7])
ARGV[11], ARGV[12] optional: a flow step's flow id and step number; its flow's hash
                 {p}:flow:<id> and the streams of the steps its end may release are then among
                 the keys after KEYS[8] (flow_end.lua: the cancelled step fails its flow, or with
                 on_failure "continue" leaves an error record to its children)

Returns OK=5 cancelled | NOT_FOUND=-2 the job is no longer there (it ran, or was cancelled) |
RUNNING=-12 a worker holds it (nothing done) | WRONG_TYPE=-6 a key holds another type.
]]
-- @include codes
-- @include rcall
-- @include key_is
-- @include now_ms
-- @include job_event
-- @include schedule_keys_ok
-- @include schedule_exists
-- @include finish_run
-- @include dedup_finish
-- @include level_of
-- @include run_log
-- @include activity
-- @include flow_end

local stream, delayed = KEYS[1], KEYS[2]
local history, hash, pending, dedup = KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local group, where, entry, exec = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local attempt, cap, has_history, extra = ARGV[5], tonumber(ARGV[6]), ARGV[7] == '1', ARGV[8]

if not (key_is(stream, 'stream') and key_is(delayed, 'zset')) then return WRONG_TYPE end
if where == 'delayed' then
  if rcall('ZREM', delayed, entry) == 0 then return NOT_FOUND end
else
  local found = rcall('XRANGE', stream, entry, entry)
  if #found == 0 then return NOT_FOUND end
  local p = redis.pcall('XPENDING', stream, group, entry, entry, 1)  -- an error: no group yet
  if type(p) == 'table' and not p['err'] and p[1] then return RUNNING end
  rcall('XDEL', stream, entry)
end
local now = now_ms()
if dedup then dedup_finish(dedup) end
if has_history and schedule_keys_ok(history, hash, pending) and schedule_exists(hash) then
  job_event(history, cap, 'cancelled', exec, attempt, now, extra)
  finish_run(hash, pending, stream, history, cap, exec, now)
end
if KEYS[7] then run_log(KEYS[7], tonumber(ARGV[9]), ARGV[10], level_of(stream)) end
activity(KEYS[8], now, {cancelled = 1})
if ARGV[11] and ARGV[11] ~= '' then
  flow_end(stream, ARGV[11], ARGV[12], 'x', attempt, '{"error":"cancelled","message":""}', now)
end
return OK

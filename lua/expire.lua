--[[ expire — jobs a worker is about to start whose start deadline passed are not run.

For each item whose deadline is before now by Redis TIME: XACK; when the entry was still pending,
XDEL it, record "expired" on the schedule's history (while the schedule exists) and end the
schedule's run (finish_run: its marker cleared, the oldest occurrence waiting behind it
released), re-arm its dedup key, append its record to the runs log and release the limit holds
it took (limit_acquire, or limit_resume before it), all in this one step. An item whose deadline
has not passed is left as it is (the worker runs it). Running it twice records nothing twice:
an expired entry is no longer pending the second time.

KEYS[1] stream  {p}:queue:<queue> (or a priority level's stream)
then per item, in item order: 3 keys when it has a schedule id (history {p}:history:<id>, hash
  {p}:schedule:<id>, pending {p}:pending:<id>), then 1 key when its 6th element is 1 (dedup
  {p}:dedup:<execution id>)
then, with ARGV[4], the limits' keys (rsched._core.keys.Keys.limits, 11 keys) from that index
then the runs log's label index keys of the items' labelled records (runs_log.run_index_keys,
  run_index.lua; none when no item has labels)
then the flows' hashes {p}:flow:<id> of the items that are flow steps, with the streams of the
  steps their ends may release (flow_end.lua: an expired step fails its flow, or with
  on_failure "continue" leaves an error record to its children)
last: the runs log {p}:runs
ARGV[1] group   ARGV[2] history cap   ARGV[3] runs log cap
ARGV[4] items   JSON array of [entry id, execution id, schedule id ('' = none), attempt,
                deadline (ms: the latest Redis time the job may start at), dedup (1 = a dedup key
                follows, 0 = none), run (the runs log record, run_log.lua; '' = none),
                limits (the limits the job holds, [ [key, template], … ]; [] = none),
                flow, step (optional: a flow step's job: its flow id and step number)]
ARGV[5] optional: the index of the first of the limits' keys, when an item holds limits ('' =
        none)
ARGV[6] optional: '1' = the last key is the partition's activity counters {p}:activity
        (activity.lua: the expired jobs count as skipped, once per call), the runs log the one
        before it

Returns the Redis time it decided by (ms), then one code per item: OK=5 not expired, run it
(nothing written) | EXPIRED=10 expired: acknowledged and recorded, do not run it |
NOT_PENDING=-10 past its deadline but no longer pending (an earlier call expired it, or another
worker took it over): do not run it. Or one code for the whole call, nothing written:
BAD_ARGS=-7 ARGV[4] is not a JSON array of items | WRONG_TYPE=-6 the stream or a limits key has
another type. (The worker learns the server's clock from the time: it does not call for jobs
whose deadline is far off by it.)
]]
-- @include codes
-- @include rcall
-- @include key_is
-- @include now_ms
-- @include job_event
-- @include schedule_live
-- @include finish_run
-- @include dedup_finish
-- @include level_of
-- @include run_log
-- @include limit_keys
-- @include limit_keys_ok
-- @include limit_release
-- @include activity
-- @include flow_end

local stream = KEYS[1]
local group, cap, runs_cap = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local activity_key = ARGV[6] == '1' and KEYS[#KEYS] or nil
local runs = KEYS[#KEYS - (activity_key and 1 or 0)]
local ok, items = pcall(cjson.decode, ARGV[4])
if not ok or type(items) ~= 'table' then return BAD_ARGS end
for i = 1, #items do
  if type(items[i]) ~= 'table' or not tonumber(items[i][5]) then return BAD_ARGS end
end
local first_limit = tonumber(ARGV[5] or '')
local L = first_limit and limit_keys(first_limit)
if not key_is(stream, 'stream') or (L and not limit_keys_ok(L)) then return WRONG_TYPE end
local level = level_of(stream)
local lcache = {}
local now = now_ms()
local out = {now}
local expired = 0
local k = 2

-- The schedule's side of an expired job: its history event and the end of its run.
local function end_run(history, hash, pending, exec, attempt)
  if schedule_live(hash) and key_is(pending, 'zset')
     and job_event(history, cap, 'expired', exec, attempt, now, '') then
    finish_run(hash, pending, stream, history, cap, exec, now)
  end
end

for i = 1, #items do
  local it = items[i]
  local id, exec, sid, attempt = it[1], it[2], it[3], it[4]
  local history, hash, pending, dedup
  if sid ~= '' then
    history, hash, pending = KEYS[k], KEYS[k + 1], KEYS[k + 2]
    k = k + 3
  end
  if it[6] == 1 then
    dedup = KEYS[k]
    k = k + 1
  end
  local code = OK
  if now > tonumber(it[5]) then
    code = NOT_PENDING
    if rcall('XACK', stream, group, id) == 1 then
      code = EXPIRED
      expired = expired + 1
      rcall('XDEL', stream, id)
      if dedup then dedup_finish(dedup) end
      if sid ~= '' then end_run(history, hash, pending, exec, attempt) end
      run_log(runs, runs_cap, it[7], level)
      if L and type(it[8]) == 'table' then limit_release(L, now, exec, it[8], lcache) end
      if it[9] and it[9] ~= '' then
        flow_end(stream, it[9], it[10], 'e', attempt,
                 '{"error":"expired","message":"not started within its start deadline"}', now)
      end
    end
  end
  out[#out + 1] = code
end
if expired > 0 then activity(activity_key, now, {skipped = expired}) end
return out

--[[ fire — fire a batch of due occurrences, each exactly once. Called by the leading scheduler.

Guarantees: nothing is written unless the caller still holds the lease (fencing) and every
argument is well formed. For each item independently: it fires only if the schedule exists, is
active, has the version the scheduler computed from (an updated, or removed and re-created,
schedule never fires its old spec), still has its index score (its next run) equal to `expect`
(this occurrence has not fired yet: a re-sent call or a racing scheduler finds it moved and
does nothing), and `sched` is due by Redis TIME. Each item is validated (key types and stored
fields included) before its first write, so an item is applied whole or not at all, and one bad
item never stops the others. (The hash's type is checked by the HMGET that reads it, the
history's by the item's first write, a push that fails without writing anything when the key
holds another type; the run marker lives in the hash, see marker.lua.)

KEYS[1] leader      STRING lease value "<token>:<owner>"
KEYS[2] schedules   ZSET of schedules by next run
KEYS[3] backlogs    ZSET of schedules holding pending occurrences (marker.lua)
KEYS[4] runs        the runs log {p}:runs, where skipped occurrences (overlap,
                    misfire=skip, catch_up_limit) are recorded (runs_log.lua); on-time fires
                    never write to it. Optional with exactly 3 KEYS (a caller of an older rsched)
With 3 or 4 KEYS, that is all (a single server). On a cluster every key the script touches is
declared, so that a live migration of the slot answers ASK / TRYAGAIN for the whole call
(rather than failing it half-way, or reading a key not moved yet as absent): more than 4 KEYS,
KEYS[4] the runs log, then:
KEYS[5..4+P]        the stream of each policy of ARGV[9..8+P], in that order (its queue's
                    stream: the prefix ARGV[7] and the policy's queue)
KEYS[5+P..]         3 keys per item, in item order: its hash, history and pending set (the
                    prefixes ARGV[4..6] followed by its id)
so #KEYS = 4 + P + 3 x items. The script still builds every name from the prefixes (on a single
server, where no slot moves, the batch carries no names: they would cost the herd's fires more
than noise) and refuses the call as BAD_ARGS when a declared name is not the one it builds.

ARGV[1] lease       the caller's lease value "<token>:<owner>"
ARGV[2] cap         history length cap
ARGV[3] cancel      pub/sub channel for cancel_previous
ARGV[4..7]          key prefixes of a schedule's hash, history, pending set, and of a queue's
                    stream ("{p}:schedule:", "{p}:history:", "{p}:pending:", "{p}:queue:"):
                    an item's keys are the prefix followed by its id (its policy's queue for
                    the stream). Passing prefixes instead of four names per item
                    halves what a batch carries; every key keeps the hash tag of KEYS, so the
                    script still touches a single slot (and declares them all on a cluster).
ARGV[8]             P, the number of policies that follow
ARGV[9..8+P]        the policies of the batch's items, one string each:
                    "<overlap> <queue> <max_runs> <buffer_limit> <opts>" (max_runs '' = none,
                    buffer_limit '' = 100, opts '' = all defaults, else the hash's JSON
                    object): the policy fields of the version the scheduler planned with. Only
                    an upsert writes them and it moves the version, so they are the hash's
                    whenever the item's version check passes; sending them spares every fire
                    reading five more fields.
then the items, in order, in groups of items that share a header: a header arg, then two args
  per item of the group, its id and its version. A herd's items share their times and policy:
  the header is sent and parsed once for all of them, and an item costs two plain args
  (parsing strings is a large part of what an item costs in Lua).
  header "<count> <expect> <next> <policy>" for occurrences on time,
         "<count> <expect> <next> <policy> <sched> <action> <missed>" otherwise:
  count    the number of items in the group (> 0)
  expect   the next_run the scheduler read (ms)
  next     the following occurrence (ms), or '' when there is none
  policy   the position of its policy among ARGV[9..8+P] (1 = the first)
  sched    the occurrence to run (ms; the short form runs `expect`)
  action   'fire' (on time), 'misfire' (one run standing for `missed` late occurrences),
           'catch_up' (one occurrence of a catch-up: it runs under any overlap policy, queued
           behind the schedule's unfinished run unless overlap=allow), 'skip' (misfire policy
           skip: no job, only history), 'limit' (`missed` occurrences older than what
           catch_up_limit lets run: no job, only history)
  id       a schedule id rsched accepts (letters, digits, '. _ - :')
  version  the hash's "version" field ("<generation>:<created_at>") the plan was computed
           from ('' = none)

Returns one string: comma-separated codes, one per item, then ';' and the microseconds the
script took by the server's clock (TIME at its start and end; 0 where the server gives a script
one frozen TIME, as Valkey does). The scheduler sizes its batches by that time.
The codes:
  FIRED=1   SKIPPED=2 by overlap policy   BUFFERED=3 (pending behind the unfinished run)
  MISFIRE_SKIPPED=4
  STALE=0 (gone, paused, completed, other version, or already fired; the index entry is
    removed when the hash is gone, and set to +inf when the hash is paused or completed)
  NOT_DUE=-5 not due yet
  WRONG_TYPE=-6 a key of this schedule has the wrong type, or its hash lacks a task or holds a
    state field (runs, run_until) that is not a number (left untouched)
or a single code for the whole call, nothing written: NOT_LEADER=-1 the lease is not the
caller's; BAD_ARGS=-7 malformed arguments (an item, a policy, or a declared key that is not
the one the script builds); BAD_INDEX=-8 the schedules
index is not a sorted set.
]]
-- @include common
-- @include marker
-- @include runs_log
-- @include fire_job

local started = redis.call('TIME')
local leader_key, schedules_key, backlogs_key = KEYS[1], KEYS[2], KEYS[3]
fire_job_runs(KEYS[4])
local lease, cap, cancel_channel = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local hash_prefix, history_prefix, pending_prefix, stream_prefix = ARGV[4], ARGV[5], ARGV[6],
  ARGV[7]
local npolicies = tonumber(ARGV[8])
if #KEYS < 3 or not cap or cap < 1 or not npolicies or #ARGV < 8 + npolicies then return '-7' end
-- Declared keys (cluster): the position of the first item's, else nil.
local declared = nil
if #KEYS > 4 then declared = 5 + npolicies end
local HEAD = 8 + npolicies
local ACTIONS = {fire = true, misfire = true, catch_up = true, skip = true, limit = true}
local OVERLAPS = {allow = true, skip = true, buffer_one = true, buffer_all = true,
                  cancel_previous = true}
-- Character sets rather than %S/%d classes, and the long form only when needed.
local GROUP = '^([0-9]+) (%-?[0-9]+) (%-?[0-9]*) ([0-9]+)(.*)$'
local TAIL = '^ (%-?[0-9]+) ([a-z_]+) ([0-9]+)$'
local POLICY = '^([a-z_]+) ([^ ]+) ([0-9]*) ([0-9]*) (.*)$'

-- The index is read once for the whole batch (ZMSCORE) and written once at the end; `index`
-- holds each schedule's score as this batch leaves it (a catch_up batch may hold several
-- occurrences of one schedule, each seeing the move of the one before), `zadd` and `zrem` the
-- writes, in item order (ZADD keeps the last score given for a member).
local index, zadd, zrem = {}, {}, {}

local function move(sid, score)
  index[sid] = score
  if score then
    local z = #zadd
    zadd[z + 1], zadd[z + 2] = score, sid
  else
    zrem[#zrem + 1] = sid
  end
end

-- A stale item whose index entry disagrees with its hash (hash deleted or edited by hand) would
-- come due again at once, forever: make the index agree with the hash instead. An active
-- schedule's next run lives only in the index, so that entry is left as it is; one with no
-- entry (parked since it was read) is left alone.
local function heal_index(sid, exists, status, score)
  if not exists then
    if score then move(sid, false) end
  elseif status and score and score ~= 'inf' then
    move(sid, 'inf')
  end
end

local policies = {}
for i = 1, npolicies do
  local overlap, queue, max_runs, limit, opts = string.match(ARGV[8 + i], POLICY)
  if not OVERLAPS[overlap] then return '-7' end
  -- Keyed by the position as items write it: looking a string up costs less than tonumber.
  local p = policy_of(overlap, queue, max_runs ~= '' and max_runs, opts ~= '' and opts,
                      limit ~= '' and limit)
  if not p or (declared and KEYS[4 + i] ~= stream_prefix .. queue) then return '-7' end
  policies[tostring(i)] = p
end
-- The groups in order (their header fields and where their items start), and every item's id
-- for ZMSCORE; the items themselves are read from ARGV where they are.
local groups, sids = {}, {}
local match = string.match
local n, j, last = 0, HEAD + 1, #ARGV
while j <= last do
  local count, expect, nxt, pos, tail = match(ARGV[j], GROUP)
  count = tonumber(count)
  local p = policies[pos]
  if not count or count < 1 or not p or j + 2 * count > last then return '-7' end
  local g = {first = j + 1, last = j + 2 * count, expect = expect, nxt = nxt, p = p}
  if tail ~= '' then
    g.sched, g.action, g.missed = match(tail, TAIL)
    if not g.sched or not ACTIONS[g.action] then return '-7' end
  end
  groups[#groups + 1] = g
  for k = g.first, g.last, 2 do
    local sid = ARGV[k]
    if sid == '' then return '-7' end
    if declared then
      local d = declared + 3 * n
      if KEYS[d] ~= hash_prefix .. sid or KEYS[d + 1] ~= history_prefix .. sid
         or KEYS[d + 2] ~= pending_prefix .. sid then
        return '-7'
      end
    end
    n = n + 1
    sids[n] = sid
  end
  j = g.last + 1
end
if declared and #KEYS ~= declared - 1 + 3 * n then return '-7' end
if n == 0 then return '' end
if rcall('GET', leader_key) ~= lease then return '-1' end
if not key_is(schedules_key, 'zset') then return '-8' end
for first = 1, n, 1000 do
  local last = math.min(n, first + 999)
  local scores = rcall('ZMSCORE', schedules_key, unpack(sids, first, last))
  for i = first, last do index[sids[i]] = scores[i - first + 1] end
end

local now = now_ms()
local results = {}
-- Stream key of each queue, false when that key holds another type (checked once per batch).
local streams = {}
local unpack = unpack  -- a local: read for every item

local i = 0
for _, g in ipairs(groups) do
  local expect, nxt, p, action, missed = g.expect, g.nxt, g.p, g.action, g.missed
  local sched = g.sched or expect
  for k = g.first, g.last, 2 do
    i = i + 1
    local sid = ARGV[k]
    local code, score
    local hash = hash_prefix .. sid
    -- One read of the hash (which is also its type check) gives the version check and the state
    -- fire_job and advance need.
    local f = rpcall('HMGET', hash, unpack(JOB_FIELDS, 1, STATE_FIELDS))
    if f.err and wrong_type(f) then
      code = -6
    elseif f[F_VERSION] ~= ARGV[k + 1] or index[sid] ~= expect or f[F_STATUS] then
      code = 0  -- status is absent exactly when the schedule is active
      heal_index(sid, f[F_VERSION], f[F_STATUS], index[sid])
    elseif not fire_job_ok(f) then
      code = -6
    elseif (SCHED_MS[sched] or sched_ms(sched)) > now then
      code = -5
    else
      local history = history_prefix .. sid
      if action == 'skip' or action == 'limit' then
        -- misfired: the misfire policy, how many occurrences, why (catch_up_limit)
        local token = 'm' .. b62(now - sched_ms(sched)) .. ',skip,' .. b62(tonumber(missed))
        if action == 'limit' then
          token = 'm' .. b62(now - sched_ms(sched)) .. ',catch_up,' .. b62(tonumber(missed)) ..
                  ',catch_up_limit'
        end
        if rec_first(history, cap, sched, token) then
          score = advance(hash, sched, nxt, false, true, p)
          code = 4
          if KEYS[4] then
            run_skipped(KEYS[4], sid, f[F_TASK], p.queue, sched,
                        action == 'limit' and 'catch_up_limit' or 'misfire')
          end
        else
          code = -6
        end
      else
        local stream = streams[p.queue]
        if stream == nil then
          stream = stream_prefix .. p.queue
          if not key_is(stream, 'stream') then stream = false end
          streams[p.queue] = stream
        end
        -- Pending occurrences exist only beside a run marker (marker.lua): with none, a fire
        -- never looks at them.
        local pending = nil
        if f[F_RUN] and p.overlap ~= 'allow' then pending = pending_prefix .. sid end
        if not stream then
          code = -6
        else
          local origin, late_ones = 'schedule', nil
          if action and action ~= 'fire' then -- misfire, catch_up
            origin, late_ones = 'misfire', missed
          end
          local exec, run_until
          code, exec, run_until = fire_job(hash, history, pending, stream, sid, sched, now, origin,
                                           cap, cancel_channel, late_ones, f, p,
                                           action == 'catch_up', backlogs_key)
          if code > 0 then
            -- A pending occurrence counts as a run: it is queued as soon as the run ends.
            score = advance(hash, sched, nxt, code ~= 2, true, p, run_until and exec, run_until)
          end
        end
      end
    end
    if score then -- move(sid, score), inline
      index[sid] = score
      local z = #zadd
      zadd[z + 1], zadd[z + 2] = score, sid
    end
    results[i] = code
  end
end

for first = 1, #zadd, 1000 do
  rcall('ZADD', schedules_key, unpack(zadd, first, math.min(#zadd, first + 999)))
end
for first = 1, #zrem, 1000 do
  rcall('ZREM', schedules_key, unpack(zrem, first, math.min(#zrem, first + 999)))
end
local ended = redis.call('TIME')
return table.concat(results, ',') .. ';' ..
  string.format('%d', (tonumber(ended[1]) - tonumber(started[1])) * 1000000 + tonumber(ended[2]) -
           tonumber(started[2]))

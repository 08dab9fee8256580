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
holds another type; the run marker lives in the hash, see includes/marker.lua.)

KEYS[1] leader      STRING lease value "<token>:<owner>"
KEYS[2] schedules   ZSET of schedules by next run
KEYS[3] backlogs    ZSET of schedules holding pending occurrences (pending_push.lua)
KEYS[4] runs        the runs log {p}:runs, where skipped occurrences (overlap,
                    misfire=skip, catch_up_limit, excluded, debounced) are recorded
                    (run_log.lua), with their plan's labels; on-time fires never write to it
KEYS[5] activity    HASH, the partition's activity counters {p}:activity (activity.lua): the
                    call's fires, skips and fire lags, counted once per call
With 5 KEYS, that is all (a single server). On a cluster every key the script touches is
declared, so that a live migration of the slot answers ASK / TRYAGAIN for the whole call
(rather than failing it half-way, or reading a key not moved yet as absent): more than 5 KEYS,
KEYS[5] the activity counters, then:
KEYS[6..5+P]        the stream of each plan of ARGV[10..9+P], in that order (its queue's
                    stream: the prefix ARGV[7] and the plan's queue)
KEYS[6+P..5+P+D]    the delayed set of each plan with a debounce, in plan order (the prefix
                    ARGV[8] and the plan's queue without its level)
KEYS[6+P+D..]       3 keys per item, in item order: its hash, history and pending set (the
                    prefixes ARGV[4..6] followed by its id)
so #KEYS = 5 + P + D + 3 x items. The script still builds every name from the prefixes (on a
single server, where no slot moves, the batch carries no names: they would cost the herd's fires
more than noise) and refuses the call as BAD_ARGS when a declared name is not the one it builds.
Last, on a single server too, when a plan has labels: the runs log's label index keys of the
batch's labelled plans (each pair's {p}:runs:label:<k>=<v>, then {p}:runs:labels once;
rsched._store.runs_log.label_index_keys), where a skipped occurrence's record is indexed
(run_index.lua). They are told from what comes before them by their names (the runs log's name
followed by ':'); a batch without labels declares none and pays one comparison a call.

ARGV[1] lease       the caller's lease value "<token>:<owner>"
ARGV[2] cap         history length cap
ARGV[3] cancel      pub/sub channel for cancel_previous
ARGV[4..7]          key prefixes of a schedule's hash, history, pending set, and of a queue's
                    stream ("{p}:schedule:", "{p}:history:", "{p}:pending:", "{p}:queue:"):
                    an item's keys are the prefix followed by its id (its plan's queue for
                    the stream). Passing prefixes instead of four names per item
                    halves what a batch carries; every key keeps the hash tag of KEYS, so the
                    script still touches a single slot (and declares them all on a cluster).
ARGV[8]             key prefix of a queue's delayed set ("{p}:delayed:"), where a plan with a
                    debounce puts its jobs (includes/debounce_fire.lua)
ARGV[9]             P, the number of plans that follow; "<P> traced" when the scheduler traces
                    (docs/tracing.md): each item then has a third arg, below
ARGV[10..9+P]       the plans of the batch's items, one string each (FireSpec.arg):
                    "<overlap> <queue> <max_runs> <buffer_limit> <debounce> <labels> <opts>"
                    (max_runs '' = none, buffer_limit '' = 100, debounce '' = none, else ms,
                    labels '' = none, else the hash's "k=v,k=v", which its jobs carry, opts ''
                    = all defaults, else the hash's JSON object): the plan fields of the version
                    the scheduler planned with. Only an upsert writes them and it moves the
                    version, so they are the hash's whenever the item's version check passes;
                    sending them spares every fire reading six more fields.
then the items, in order, in groups of items that share a header: a header arg, then two args
  per item of the group, its id and its version (three in a traced call: then the W3C
  traceparent its job carries, '' for none). A herd's items share their times and plan:
  the header is sent and parsed once for all of them, and an item costs two plain args
  (parsing strings is a large part of what an item costs in Lua).
  header "<count> <expect> <next> <plan>" for occurrences on time,
         "<count> <expect> <next> <plan> <sched> <action> <missed>" otherwise:
  count    the number of items in the group (> 0)
  expect   the next_run the scheduler read (ms)
  next     the following occurrence (ms), or '' when there is none
  plan     the position of its plan among ARGV[10..9+P] (1 = the first)
  sched    the occurrence to run (ms; the short form runs `expect`)
  action   'fire' (on time), 'misfire' (one run standing for `missed` late occurrences),
           'catch_up' (one occurrence of a catch-up: it runs under any overlap policy, queued
           behind the schedule's unfinished run unless overlap=allow), 'skip' (misfire policy
           skip: no job, only history), 'limit' (`missed` occurrences older than what
           catch_up_limit lets run: no job, only history), 'exclude' (an exclusion calendar
           excludes it: no job, only history and the runs log). 'fire' in the long form is an
           occurrence on time whose schedule has a jitter: it is due at `expect`, its delay
           after `sched`, which its fired record keeps.
  missed   for 'exclude', the name of the calendar instead
  id       a schedule id rsched accepts (letters, digits, '. _ - :')
  version  the hash's "version" field ("<generation>:<created_at>") the plan was computed
           from ('' = none)
  traceparent  (a traced call only) "00-<trace id>-<span id>-<flags>" in lowercase hex, or ''

Returns one string: comma-separated codes, one per item, then ';' and the microseconds the
script took by the server's clock (TIME at its start and end; 0 where the server gives a script
one frozen TIME, as Valkey does). The scheduler sizes its batches by that time.
The codes:
  FIRED=1   SKIPPED=2 by overlap policy   BUFFERED=3 (pending behind the unfinished run)
  MISFIRE_SKIPPED=4   DEBOUNCED=9 merged into the schedule's open debounce window (its job,
    in the delayed set, falls due later)   EXCLUDED=11 not run: an exclusion calendar excludes
    it (recorded in the history and the runs log, skipped with reason excluded)
  STALE=0 (gone, paused, completed, other version, or already fired; the index entry is
    removed when the hash is gone, and set to +inf when the hash is paused or completed)
  NOT_DUE=-5 not due yet
  WRONG_TYPE=-6 a key of this schedule has the wrong type, or its hash lacks a task or holds a
    state field (runs, run_until) that is not a number (left untouched)
or a single code for the whole call, nothing written: NOT_LEADER=-1 the lease is not the
caller's; BAD_ARGS=-7 malformed arguments (an item, a plan, or a declared key that is not
the one the script builds); BAD_INDEX=-8 the schedules
index is not a sorted set.
]]
-- @include codes
-- @include rcall
-- @include key_is
-- @include wrong_type
-- @include now_ms
-- @include b62
-- @include rec_first
-- @include sched_ms
-- @include job_fields
-- @include plan_of
-- @include job_state
-- @include esc
-- @include run_index
-- @include run_skipped
-- @include fire_job
-- @include advance
-- @include activity
-- @include activity_lag
-- @include traceparent

local started = rcall('TIME')
local leader_key, schedules_key, backlogs_key, runs_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local activity_key = KEYS[5]
local lease, cap, cancel_channel = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local hash_prefix, history_prefix, pending_prefix, stream_prefix = ARGV[4], ARGV[5], ARGV[6],
  ARGV[7]
local delayed_prefix = ARGV[8]
local nplans, traced = string.match(ARGV[9] or '', '^([0-9]+)( ?[a-z]*)$')
nplans = tonumber(nplans)
-- The args per item: id, version (and traceparent in a traced call).
local stride = (traced == '' and 2) or (traced == ' traced' and 3) or nil

local ACTIONS = {fire = true, misfire = true, catch_up = true, skip = true, limit = true,
                 exclude = true}
local OVERLAPS = {allow = true, skip = true, buffer_one = true, buffer_all = true,
                  cancel_previous = true}
-- Character sets rather than %S/%d classes, and the long form only when needed.
local GROUP = '^([0-9]+) (%-?[0-9]+) (%-?[0-9]*) ([0-9]+)(.*)$'
local TAIL = '^ (%-?[0-9]+) ([a-z_]+) ([^ ]+)$'
local PLAN = '^([a-z_]+) ([^ ]+) ([0-9]*) ([0-9]*) ([0-9]*) ([^ ]*) (.*)$'

-- The batch's plans (ARGV[10..9+P]), keyed by their position as text (how items name them:
-- looking a string up costs less than tonumber), and how many have a debounce; or nil when one
-- is malformed or a declared key (declared: true on a cluster) is not the one it names. A
-- debounced plan's delayed set is p.delayed (false when that key holds another type: its
-- items are refused as WRONG_TYPE).
local function read_plans(declared)
  local plans, ndebounced = {}, 0
  for i = 1, nplans do
    local overlap, queue, max_runs, limit, debounce, labels, opts = string.match(ARGV[9 + i],
                                                                                 PLAN)
    if not OVERLAPS[overlap] then return nil end
    local p = plan_of(overlap, queue, max_runs ~= '' and max_runs, opts ~= '' and opts,
                      limit ~= '' and limit, debounce ~= '' and debounce, labels)
    if not p or (declared and KEYS[5 + i] ~= stream_prefix .. queue) then return nil end
    if p.debounce then
      ndebounced = ndebounced + 1
      local delayed = delayed_prefix .. string.match(queue, '^[^#]*')
      if declared and KEYS[5 + nplans + ndebounced] ~= delayed then return nil end
      p.delayed = key_is(delayed, 'zset') and delayed
    end
    plans[tostring(i)] = p
  end
  return plans, ndebounced
end

-- The groups of items in order (their header fields, their plan and where their items start in
-- ARGV) and every item's id, or nil when any is malformed. The items themselves are read from
-- ARGV where they are. first_declared: the position of the first item's declared keys (nil on a
-- single server); they must be the names the script builds.
local function read_groups(plans, first_declared)
  local groups, sids = {}, {}
  local n, j, last = 0, 9 + nplans + 1, #ARGV
  while j <= last do
    local count, expect, nxt, pos, tail = string.match(ARGV[j], GROUP)
    count = tonumber(count)
    local p = plans[pos]
    if not count or count < 1 or not p or j + stride * count > last then return nil end
    local g = {first = j + 1, last = j + stride * count, expect = expect, nxt = nxt, p = p}
    if tail ~= '' then
      g.sched, g.action, g.missed = string.match(tail, TAIL)
      if not g.sched or not ACTIONS[g.action] then return nil end
      if g.action == 'exclude' then -- the last field names the calendar, not a count
        g.calendar, g.missed = g.missed, nil
      elseif not string.match(g.missed, '^[0-9]+$') then
        return nil
      end
    end
    groups[#groups + 1] = g
    for k = g.first, g.last, stride do
      local sid = ARGV[k]
      if sid == '' then return nil end
      if stride == 3 and ARGV[k + 2] ~= '' and not string.match(ARGV[k + 2], TRACEPARENT) then
        return nil
      end
      if first_declared then
        local d = first_declared + 3 * n
        if KEYS[d] ~= hash_prefix .. sid or KEYS[d + 1] ~= history_prefix .. sid
           or KEYS[d + 2] ~= pending_prefix .. sid then
          return nil
        end
      end
      n = n + 1
      sids[n] = sid
    end
    j = g.last + 1
  end
  return groups, sids
end

-- The index is read once for the whole batch (ZMSCORE) and written once at the end (write_index).
-- index.score holds each schedule's score as this batch leaves it (a catch_up batch may hold
-- several occurrences of one schedule, each seeing the move of the one before), index.zadd and
-- index.zrem the writes, in item order (ZADD keeps the last score given for a member).
local function read_index(sids)
  local index = {score = {}, zadd = {}, zrem = {}}
  local score = index.score
  for first = 1, #sids, 1000 do
    local last = math.min(#sids, first + 999)
    local scores = rcall('ZMSCORE', schedules_key, unpack(sids, first, last))
    for i = first, last do score[sids[i]] = scores[i - first + 1] end
  end
  return index
end

-- Move `sid` to `score` in the index (false: out of it).
local function move(index, sid, score)
  index.score[sid] = score
  if score then
    local zadd = index.zadd
    local z = #zadd
    zadd[z + 1], zadd[z + 2] = score, sid
  else
    index.zrem[#index.zrem + 1] = sid
  end
end

-- A stale item whose index entry disagrees with its hash (hash deleted or edited by hand) would
-- come due again at once, forever: make the index agree with the hash instead. An active
-- schedule's next run lives only in the index, so that entry is left as it is; one with no
-- entry (parked since it was read) is left alone.
local function heal_index(index, sid, exists, status)
  local score = index.score[sid]
  if not exists then
    if score then move(index, sid, false) end
  elseif status and score and score ~= 'inf' then
    move(index, sid, 'inf')
  end
end

-- The stream of `queue`, false when that key holds another type (checked once per batch:
-- `streams` remembers each queue's).
local function queue_stream(streams, queue)
  local stream = stream_prefix .. queue
  if not key_is(stream, 'stream') then stream = false end
  streams[queue] = stream
  return stream
end

-- A misfire policy that runs nothing ('skip', or 'limit': occurrences older than catch_up_limit
-- lets run): only the history and the runs log record it. Returns code, new index score.
local function record_misfire(shared, sid, hash, sched, ms, nxt, action, missed, f, p, runs)
  -- misfired: the misfire policy, how many occurrences, why (catch_up_limit)
  local late = b62(shared.now - ms)
  local token = 'm' .. late .. ',skip,' .. b62(tonumber(missed))
  if action == 'limit' then
    token = 'm' .. late .. ',catch_up,' .. b62(tonumber(missed)) .. ',catch_up_limit'
  end
  if not rec_first(history_prefix .. sid, cap, sched, token) then return WRONG_TYPE end
  local score = advance(hash, sched, nxt, false, true, p, runs)
  run_skipped(runs_key, sid, f[F_TASK], p.queue, sched,
              action == 'limit' and 'catch_up_limit' or 'misfire', nil, p.labels)
  return MISFIRE_SKIPPED, score
end

-- An occurrence an exclusion calendar keeps from running: only the history and the runs log
-- record it (skipped, reason excluded, and the calendar). Returns code, new index score.
local function record_excluded(shared, sid, hash, sched, ms, nxt, calendar, f, p, runs)
  local token = 's' .. b62(shared.now - ms) .. ',excluded,,,,,' .. esc(calendar)
  if not rec_first(history_prefix .. sid, cap, sched, token) then return WRONG_TYPE end
  local score = advance(hash, sched, nxt, false, true, p, runs)
  run_skipped(runs_key, sid, f[F_TASK], p.queue, sched, 'excluded', 'calendar ' .. calendar,
              p.labels)
  return EXCLUDED, score
end

-- Every item in order: one code each (a number), and the index moved as it goes. An occurrence
-- that runs ('fire', 'misfire', 'catch_up') is fire_job, then advance, written out in the loop:
-- it is what nearly every item of a herd does, and in Redis's Lua each function call and table
-- lookup on that path shows in the herd's time (so are move and queue_stream's cache hit).
local function fire_groups(groups, index, shared)
  local results, streams = {}, {}
  local skipped, lags = 0, {} -- what the activity counters get (count_activity)
  local scores, zadd = index.score, index.zadd
  local now, rpcall, unpack, step = shared.now, redis.pcall, unpack, stride
  local i = 0
  for _, g in ipairs(groups) do
    local expect, nxt, p, action, missed = g.expect, g.nxt, g.p, g.action, g.missed
    local sched = g.sched or expect
    local ms = sched_ms(sched)
    local origin, late_ones, keep = 'schedule', nil, action == 'catch_up'
    -- An on-time occurrence fires when it is due (expect): with a jitter, that is its delay
    -- after its time (sched), which the history records.
    local due_at, jitter = ms, nil
    if action == 'fire' and sched ~= expect then
      due_at = sched_ms(expect)
      jitter = b62(due_at - ms)
    elseif action and action ~= 'fire' then -- misfire, catch_up
      origin, late_ones = 'misfire', missed
    end
    local fired = 0
    for k = g.first, g.last, step do
      i = i + 1
      local sid = ARGV[k]
      local code, score
      local hash = hash_prefix .. sid
      -- One read of the hash (which is also its type check) gives the version check and the
      -- state fire_job and advance need.
      local f = rpcall('HMGET', hash, unpack(JOB_FIELDS, 1, STATE_FIELDS))
      local runs, gen
      if f.err and wrong_type(f) then
        code = WRONG_TYPE
      elseif f[F_VERSION] ~= ARGV[k + 1] or scores[sid] ~= expect or f[F_STATUS] then
        code = STALE -- status is absent exactly when the schedule is active
        heal_index(index, sid, f[F_VERSION], f[F_STATUS])
      else
        runs, gen = job_state(f)
        if not runs then
          code = WRONG_TYPE
        elseif due_at > now then
          code = NOT_DUE
        elseif action == 'skip' or action == 'limit' then
          code, score = record_misfire(shared, sid, hash, sched, ms, nxt, action, missed, f, p,
                                       runs)
          if score then skipped = skipped + 1 end
        elseif action == 'exclude' then
          code, score = record_excluded(shared, sid, hash, sched, ms, nxt, g.calendar, f, p, runs)
          if score then skipped = skipped + 1 end
        else
          local stream = streams[p.queue]
          if stream == nil then stream = queue_stream(streams, p.queue) end
          if not stream then
            code = WRONG_TYPE
          else
            -- Pending occurrences exist only beside a run marker (marker.lua): with none, a fire
            -- never looks at them.
            local pending = nil
            if f[F_RUN] and p.overlap ~= 'allow' then pending = pending_prefix .. sid end
            local exec, run_until, tp
            if step == 3 and ARGV[k + 2] ~= '' then tp = ARGV[k + 2] end
            code, exec, run_until = fire_job(shared, hash, history_prefix .. sid, pending, stream,
                                             sid, sched, origin, late_ones, f, gen, p, keep,
                                             jitter, tp)
            if code == FIRED then
              fired = fired + 1
            elseif code == SKIPPED then
              skipped = skipped + 1
            end
            if code > 0 then
              -- A pending occurrence counts as a run: it is queued as soon as the run ends (one
              -- merged into a debounce window does not: the window's job is the run).
              score = advance(hash, sched, nxt, code == FIRED or code == BUFFERED, true, p,
                              runs, run_until and exec, run_until)
            end
          end
        end
      end
      if score then -- move(index, sid, score)
        scores[sid] = score
        local z = #zadd
        zadd[z + 1], zadd[z + 2] = score, sid
      end
      results[i] = code
    end
    if fired > 0 then
      -- A group's items share their due time, so their lag: one bucket for the group. Late
      -- runs of a misfire policy or a catch-up are late by design: only on-time fires count.
      if not action or action == 'fire' then
        local b = activity_lag(now - due_at)
        lags[b] = (lags[b] or 0) + fired
      end
      shared.fired = shared.fired + fired
    end
  end
  shared.skipped = skipped
  return results, lags
end

-- One write of the index's moves for the whole batch (in bounded groups: unpack has a stack
-- limit).
local function write_index(index)
  local zadd, zrem = index.zadd, index.zrem
  for first = 1, #zadd, 1000 do
    rcall('ZADD', schedules_key, unpack(zadd, first, math.min(#zadd, first + 999)))
  end
  for first = 1, #zrem, 1000 do
    rcall('ZREM', schedules_key, unpack(zrem, first, math.min(#zrem, first + 999)))
  end
end

-- The µs since `started` (a TIME reply), by the server's clock, as text.
local function took_us(started_at)
  local ended = rcall('TIME')
  return string.format('%d', (tonumber(ended[1]) - tonumber(started_at[1])) * 1000000 +
                       tonumber(ended[2]) - tonumber(started_at[2]))
end

-- The label index keys end KEYS (run_index reads them from there): how many there are.
local function index_keys()
  local n = 0
  while #KEYS - n > 5 and run_index_key(runs_key, KEYS[#KEYS - n]) do n = n + 1 end
  return n
end

if #KEYS < 5 or not cap or cap < 1 or not nplans or not stride or #ARGV < 9 + nplans then
  return tostring(BAD_ARGS)
end
local nkeys = #KEYS - index_keys()
-- On a cluster every key is declared: the plans' streams, their delayed sets (debounce), then
-- each item's keys.
local declared = nkeys > 5
local plans, ndebounced = read_plans(declared)
if not plans then return tostring(BAD_ARGS) end
local first_declared = declared and 6 + nplans + ndebounced or nil
local groups, sids = read_groups(plans, first_declared)
if not groups or (declared and nkeys ~= first_declared - 1 + 3 * #sids) then
  return tostring(BAD_ARGS)
end
if #sids == 0 then return '' end
if rcall('GET', leader_key) ~= lease then return tostring(NOT_LEADER) end
if not key_is(schedules_key, 'zset') then return tostring(BAD_INDEX) end

local index = read_index(sids)
local shared = {now = now_ms(), cap = cap, cancel = cancel_channel, backlogs = backlogs_key,
                runs = runs_key, fired = 0}
local results, lags = fire_groups(groups, index, shared)
write_index(index)
if shared.fired > 0 or shared.skipped > 0 then -- a re-sent call (all stale) writes nothing
  activity(activity_key, shared.now, {fired = shared.fired, skipped = shared.skipped}, lags)
end
return table.concat(results, ',') .. ';' .. took_us(started)

-- Include: flow_end(stream, fid, n, outcome, attempt, result, now) — step n of flow `fid` ended:
-- 'c' completed, 'd' dead, 'e' expired, 'x' cancelled. Called by the script that records the
-- step's job's end (complete, dead, expire, cancel, flow_start), in the same call, so a join is
-- released exactly once: by the script that records the last of its parents' ends.
--
-- The end is recorded once (a re-sent call, or a requeued dead step that ends again, changes
-- nothing). Field `at` keeps the time of the flow's last change, for the leader's sweep
-- (lua/flow_sweep.lua). In a running flow: a completed step, or a failed one of on_failure "continue"
-- (flag 'c'), keeps its result for its children (`result`: JSON, '' = null) and releases those
-- it was the last parent of (flow_release.lua); a failed step of on_failure "fail" fails the
-- flow (flow_stop: the steps not started are cancelled and never run). The flow ends when its
-- last step ended: completed, unless it failed or was cancelled before. An ended flow's hash
-- expires its `ttl` (ms, the runs log's retention) after it ended.
-- The flow's hash is found by name ({p}:flow:<id>, with the stream's tag) and written only when
-- the caller declared it; one that is gone (expired) or of another type is left alone.
--
-- flow_stop(fkey, state, now, failed) — a running flow ends `state` ('failed', 'cancelled'),
-- and expires its `ttl` from now:
-- every step not released yet is marked cancelled. Returns the numbers of the steps released
-- and not ended (queued or running: cancel_flow asks them to stop).
--
-- A flow a schedule's occurrence started (meta fields sid, lane, hcap: its schedule, the
-- stream of its starter job, the history's cap) is that occurrence's run: when the flow ends,
-- the run's end is recorded on the schedule's history (completed, dead for a failed flow,
-- cancelled) and the run ends (finish_run: its marker cleared, an occurrence waiting behind it
-- released), in the script that ends the flow, with the schedule's keys the caller declared.
-- @include rcall
-- @include int_text
-- @include json_str
-- @include key_is
-- @include declared
-- @include job_event
-- @include schedule_live
-- @include finish_run
-- @include flow_release

local FLOW_ENDED = {c = true, d = true, e = true, x = true}
local FLOW_EVENTS = {completed = 'completed', failed = 'dead', cancelled = 'cancelled'}

local function flow_done(fkey, state, now)
  rcall('HSET', fkey, 'state', state, 'ended', int_text(now))
  local meta = rcall('HMGET', fkey, 'sid', 'lane', 'hcap', 'failed')
  local sid = meta[1]
  if not sid then return end
  local tag = string.match(fkey, '^(.-}):flow:')
  local fid = string.sub(fkey, #tag + 7)
  local history, hash = tag .. ':history:' .. sid, tag .. ':schedule:' .. sid
  local pending, stream = tag .. ':pending:' .. sid, tag .. ':queue:' .. (meta[2] or '')
  if not (declared(history) and declared(hash) and declared(pending) and declared(stream)) then
    return
  end
  local extra = ',"flow":' .. json_str(state)
  if meta[4] then extra = extra .. ',"reason":' .. json_str('step ' .. meta[4] .. ' failed') end
  local cap = tonumber(meta[3] or '') or 100
  if schedule_live(hash) and key_is(pending, 'zset')
     and job_event(history, cap, FLOW_EVENTS[state], fid, 1, now, extra) then
    finish_run(hash, pending, stream, history, cap, fid, now)
  end
end

local function flow_over(fkey, now)
  local meta = rcall('HMGET', fkey, 'state', 'ttl')
  if meta[1] == 'running' then flow_done(fkey, 'completed', now) end
  local ttl = tonumber(meta[2] or '')
  if ttl and ttl > 0 then rcall('PEXPIRE', fkey, ttl) end
end

local function flow_stop(fkey, state, now, failed)
  local n = tonumber(rcall('HGET', fkey, 'n') or '') or 0
  if failed then rcall('HSET', fkey, 'failed', failed) end
  flow_done(fkey, state, now)
  local live, cancelled = {}, 0
  for first = 1, n, 1000 do
    local fields = {}
    for i = first, math.min(n, first + 999) do fields[#fields + 1] = i .. '.s' end
    local got = rcall('HMGET', fkey, unpack(fields))
    for j = 1, #fields do
      local i = first + j - 1
      local s = got[j]
      if not s then
        rcall('HSET', fkey, i .. '.s', 'x')
        rcall('HDEL', fkey, i .. '.w')
        cancelled = cancelled + 1
      elseif s == 'q' or s == 'r' then
        live[#live + 1] = i
      end
    end
  end
  if cancelled > 0 then rcall('HINCRBY', fkey, 'left', -cancelled) end
  flow_over(fkey, now)  -- the state is no longer running: it sets the expiry only
  return live
end

-- flow_key(stream, fid): the partition tag of `stream` and the key of flow `fid` there, when the
-- caller declared it and it is a hash or absent (nil otherwise).
local function flow_key(stream, fid)
  local tag = string.match(stream, '^(.-}):queue:')
  if not tag then return nil end
  local fkey = tag .. ':flow:' .. fid
  if not declared(fkey) or not key_is(fkey, 'hash') then return nil end
  return tag, fkey
end

local function flow_end(stream, fid, n, outcome, attempt, result, now)
  local tag, fkey = flow_key(stream, fid)
  if not tag then return end
  n = tostring(n)
  local got = rcall('HMGET', fkey, 'state', n, n .. '.s')
  local state, def, was = got[1], got[2], got[3]
  if not state or not def or (was and FLOW_ENDED[was]) then return end
  rcall('HSET', fkey, n .. '.s', outcome, n .. '.a', attempt, 'at', int_text(now))
  local left = rcall('HINCRBY', fkey, 'left', -1)
  if state == 'running' then
    local ok, d = pcall(cjson.decode, def)
    if not ok or type(d) ~= 'table' then d = {} end
    if outcome ~= 'c' and not string.find(d[6] or '', 'c', 1, true) then
      flow_stop(fkey, 'failed', now, n)
      return
    end
    if (d[8] or '') ~= '' then
      if result ~= '' then rcall('HSET', fkey, n .. '.r', result) end
      flow_children(fkey, tag, fid, d[8], now)
      left = tonumber(rcall('HGET', fkey, 'left'))
    end
  end
  if left <= 0 then flow_over(fkey, now) end
end

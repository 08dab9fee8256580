-- Include: flow_end(stream, fid, n, outcome, attempt, result, now) — step n of flow `fid` ended:
-- 'c' completed, 'd' dead, 'e' expired, 'x' cancelled. Called by the script that records the
-- step's job's end (complete, dead, expire, cancel, flow_start), in the same call, so a join is
-- released exactly once: by the script that records the last of its parents' ends.
--
-- The end is recorded once (a re-sent call, or a requeued dead step that ends again, changes
-- nothing). In a running flow: a completed step, or a failed one of on_failure "continue"
-- (flag 'c'), keeps its result for its children (`result`: JSON, '' = null) and releases those
-- it was the last parent of (flow_release.lua); a failed step of on_failure "fail" fails the
-- flow (flow_stop: the steps not started are cancelled and never run). The flow ends when its
-- last step ended: completed, unless it failed or was cancelled before. An ended flow's hash
-- expires its `ttl` (ms, the runs log's retention) after it ended.
-- The flow's hash is found by name ({p}:flow:<id>, with the stream's tag) and written only when
-- the caller declared it; one that is gone (expired) or of another type is left alone.
--
-- flow_stop(fkey, state, now, failed) — a running flow ends `state` ('failed', 'cancelled'):
-- every step not released yet is marked cancelled. Returns the numbers of the steps released
-- and not ended (queued or running: cancel_flow asks them to stop).
-- @include rcall
-- @include int_text
-- @include key_is
-- @include declared
-- @include flow_release

local FLOW_ENDED = {c = true, d = true, e = true, x = true}

local function flow_over(fkey, now)
  local meta = rcall('HMGET', fkey, 'state', 'ttl')
  if meta[1] == 'running' then
    rcall('HSET', fkey, 'state', 'completed', 'ended', int_text(now))
  end
  local ttl = tonumber(meta[2] or '')
  if ttl and ttl > 0 then rcall('PEXPIRE', fkey, ttl) end
end

local function flow_stop(fkey, state, now, failed)
  local n = tonumber(rcall('HGET', fkey, 'n') or '') or 0
  rcall('HSET', fkey, 'state', state, 'ended', int_text(now))
  if failed then rcall('HSET', fkey, 'failed', failed) end
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
  local left = tonumber(rcall('HGET', fkey, 'left')) or 0
  if cancelled > 0 then left = rcall('HINCRBY', fkey, 'left', -cancelled) end
  if left <= 0 then flow_over(fkey, now) end
  local ttl = tonumber(rcall('HGET', fkey, 'ttl') or '')
  if ttl and ttl > 0 then rcall('PEXPIRE', fkey, ttl) end
  return live
end

local function flow_end(stream, fid, n, outcome, attempt, result, now)
  local tag = string.match(stream, '^(.-}):queue:')
  if not tag then return end
  local fkey = tag .. ':flow:' .. fid
  if not declared(fkey) or not key_is(fkey, 'hash') then return end
  n = tostring(n)
  local got = rcall('HMGET', fkey, 'state', n, n .. '.s')
  local state, def, was = got[1], got[2], got[3]
  if not state or not def or (was and FLOW_ENDED[was]) then return end
  rcall('HSET', fkey, n .. '.s', outcome, n .. '.a', attempt)
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

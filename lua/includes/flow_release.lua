-- Include: flow_release(fkey, tag, fid, n, now) — step n of flow `fid` (hash `fkey`, partition
-- tag `tag`) may start: its parents all ended. Its job is added to its stream with
-- `parent_results` (field "parents": the parents' results in their order, a barrier's spliced
-- in), or, for a barrier (flag 'b'), it ends at once and its children are looked at in turn.
-- A step released or ended before is left alone (each is released once). The step's stream
-- must be declared (the ending job names the lanes of its children, field flow_next; the
-- creating call those of the roots): an undeclared one leaves the step waiting, for the
-- leader's sweep (lua/flow_sweep.lua) to release.
--
-- flow_children(fkey, tag, fid, children, now): each of `children` ("3,4") has one parent
-- fewer to wait for (field <n>.w, kept for a step of several parents only: a step without it
-- has one, this one); those left with none are released.
--
-- The step definition (rsched._core.flows.PlannedStep.encode): [task, payload, queue, level,
-- opts, flags, parents, children, next lanes, labels], the empty parts at the end left out; an
-- empty payload is '{}', an empty queue the flow's (field `queue`), empty next lanes with
-- children that queue's.
-- @include rcall
-- @include int_text
-- @include declared

local flow_children

local function flow_parent_results(fkey, parents)
  if parents == '' then return nil end
  local fields = {}
  for p in string.gmatch(parents, '%d+') do fields[#fields + 1] = p .. '.r' end
  -- In slices: unpack() takes at most ~8,000 values, and a join may follow up to 100,000.
  local got = {}
  for first = 1, #fields, 1000 do
    local part = rcall('HMGET', fkey, unpack(fields, first, math.min(#fields, first + 999)))
    for i = 1, #part do got[first + i - 1] = part[i] end
  end
  local out = {}
  for i = 1, #fields do
    local r = got[i]
    if not r then
      out[#out + 1] = 'null'
    elseif string.sub(r, 1, 2) == '\0[' then  -- a barrier's: its parents' results, spliced
      local inner = string.sub(r, 3, -2)
      if inner ~= '' then out[#out + 1] = inner end
    else
      out[#out + 1] = r
    end
  end
  return '[' .. table.concat(out, ',') .. ']'
end

local function flow_release(fkey, tag, fid, n, now)
  local got = rcall('HMGET', fkey, n, n .. '.s')
  if not got[1] or got[2] then return end
  local ok, d = pcall(cjson.decode, got[1])
  if not ok or type(d) ~= 'table' then return end
  local results = flow_parent_results(fkey, d[7] or '')
  if string.find(d[6] or '', 'b', 1, true) then
    -- '\0' marks a barrier's result: no handler's JSON starts with it.
    rcall('HSET', fkey, n .. '.s', 'c', n .. '.r', '\0' .. (results or '[]'))
    rcall('HINCRBY', fkey, 'left', -1)
    flow_children(fkey, tag, fid, d[8] or '', now)
    return
  end
  for i = 2, 10 do d[i] = d[i] or '' end
  local meta = rcall('HMGET', fkey, 'tp', 'sid', 'lane', 'queue')
  local queue = meta[4] or 'default'
  local stream = tag .. ':queue:' .. (d[3] ~= '' and d[3] or queue)
  if d[4] ~= '' then stream = stream .. '#' .. d[4] end
  if not declared(stream) then return end
  local fields = {
    'execution_id', fid .. '~' .. n, 'task', d[1], 'payload', d[2] ~= '' and d[2] or '{}',
    'attempt', '1', 'origin', 'flow', 'flow', fid, 'step', n,
  }
  local lanes = d[9] ~= '' and d[9] or (d[8] ~= '' and queue or '')
  if d[5] ~= '' then fields[#fields + 1] = 'opts'; fields[#fields + 1] = d[5] end
  if d[4] ~= '' then fields[#fields + 1] = 'priority'; fields[#fields + 1] = d[4] end
  if lanes ~= '' then fields[#fields + 1] = 'flow_next'; fields[#fields + 1] = lanes end
  if d[10] ~= '' then fields[#fields + 1] = 'labels'; fields[#fields + 1] = d[10] end
  if results then fields[#fields + 1] = 'parents'; fields[#fields + 1] = results end
  if meta[1] then fields[#fields + 1] = 'traceparent'; fields[#fields + 1] = meta[1] end
  if meta[2] then  -- its end may end the flow, and so its schedule's run: their keys
    fields[#fields + 1] = 'flow_sid'
    fields[#fields + 1] = meta[2]
    fields[#fields + 1] = 'flow_lane'
    fields[#fields + 1] = meta[3] or ''
  end
  fields[#fields + 1] = 'scheduled_at'
  fields[#fields + 1] = int_text(now)
  fields[#fields + 1] = 'fired_at'
  fields[#fields + 1] = int_text(now)
  rcall('XADD', stream, '*', unpack(fields))
  rcall('HSET', fkey, n .. '.s', 'q', 'at', int_text(now))
end

flow_children = function(fkey, tag, fid, children, now)
  for c in string.gmatch(children, '%d+') do
    if rcall('HINCRBY', fkey, c .. '.w', -1) <= 0 then
      rcall('HDEL', fkey, c .. '.w')
      flow_release(fkey, tag, fid, c, now)
    end
  end
end

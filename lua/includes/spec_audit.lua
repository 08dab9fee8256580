-- Include: spec_audit(s, old_gen, gen, fields, now) — the audit record of one upsert_one.lua
-- write, and the schedule's spec history (docs/audit.md), before the hash is rewritten.
--
-- s is upsert_one's table (s.audit: the call's audit_ctx, nil for none; s.specs: the schedule's
-- spec history key; s.id; s.created: in a bulk write, a table action -> the ids it created);
-- old_gen nil for a new schedule, whose hash is not read; `fields` the new hash's field/value
-- list (nil: the spec straight from s.args[s.from..s.to]); `now` the time of the change (ms,
-- a number or its text; nil: read when needed).
--
-- A change's record holds each field that differs between the stored hash and the new one
-- (engine state left out: version, times, runs, the run marker, the failure count). A new
-- schedule's record holds no fields: its spec is its generation 1, in its hash (and in its spec
-- history from its first change on); in a bulk write, its id joins s.created instead, and the
-- caller writes one record per action for the whole call. The spec history is written from a
-- schedule's first change on: that change pushes the spec it replaces (its actor unknown), then
-- every change pushes its new spec; capped at s.audit.keep (0: none). A spec history key of
-- another type is left alone (the change and its record are made).
-- @include rcall
-- @include key_is
-- @include marker
-- @include audit
-- @include audit_value
-- @include version_parts
-- @include now_ms

local SPEC_ENGINE = {version = true, created_at = true, updated_at = true, runs = true,
                     last_run = true, consecutive_failures = true, failures_last = true}
for _, name in ipairs(MARKER) do SPEC_ENGINE[name] = true end
-- Not part of the spec a rollback writes back: the pause is the operator's, kept as it is.
local SPEC_STATE = {status = true, pause_note = true}
local SPEC_ACTIONS = {add = 'add', upsert = 'upsert', replace = 'update'}

local function spec_audit(s, old_gen, gen, fields, now)
  local ctx = s.audit
  if not ctx then return end
  if not old_gen then
    -- A new schedule's spec is its generation 1: in its hash, and in its spec history from its
    -- first change on. Its record says who created it, not the spec again (~100 bytes a
    -- schedule at rest less, until the trail's cap).
    if s.created then
      local action = ctx.action or SPEC_ACTIONS[s.mode]
      local ids = s.created[action] or {}
      ids[#ids + 1] = s.id
      s.created[action] = ids
    else
      audit(ctx, SPEC_ACTIONS[s.mode], s.id, nil, gen)
    end
    return
  end
  local new = {}
  if fields then
    for i = 1, #fields, 2 do new[fields[i]] = fields[i + 1] end
  else
    for i = s.from, s.to, 2 do new[s.args[i]] = s.args[i + 1] end
  end
  local old = {}
  if old_gen then
    local flat = rcall('HGETALL', s.hash)
    for i = 1, #flat, 2 do old[flat[i]] = flat[i + 1] end
  end
  local changes = {}
  for name, value in pairs(new) do
    if not SPEC_ENGINE[name] and old[name] ~= value then
      changes[name] = {audit_value(old[name]), audit_value(value)}
    end
  end
  for name, value in pairs(old) do
    if not SPEC_ENGINE[name] and new[name] == nil then
      changes[name] = {audit_value(value), cjson.null}
    end
  end
  audit(ctx, SPEC_ACTIONS[s.mode], s.id, old_gen, gen, changes)
  if not old_gen or ctx.keep < 1 or not key_is(s.specs, 'list') then return end
  local function spec_of(hash)
    local spec = {}
    for name, value in pairs(hash) do
      if not SPEC_ENGINE[name] and not SPEC_STATE[name] then spec[name] = value end
    end
    return spec
  end
  -- The spec it replaces is kept unless the history's newest entry is it already: the first
  -- change, or after a writer that keeps no history (an older rsched during a rolling deploy).
  -- A history of later generations is an earlier schedule's of the same id (removed by an
  -- older rsched, which left it): it goes.
  now = tonumber(now) or now_ms()
  local head = rcall('LINDEX', s.specs, 0)
  local head_gen = head and tonumber(string.match(head, '^%[(%d+),'))
  if head_gen ~= old_gen then
    if head and (not head_gen or head_gen > old_gen) then rcall('DEL', s.specs) end
    local _, created = version_parts(old.version)
    local at = tonumber(old.updated_at or created) or now
    rcall('LPUSH', s.specs, cjson.encode({old_gen, at, cjson.null, cjson.null, spec_of(old)}))
  end
  rcall('LPUSH', s.specs, cjson.encode({gen, now, ctx.actor, ctx.source, spec_of(new)}))
  rcall('LTRIM', s.specs, 0, ctx.keep - 1)
end

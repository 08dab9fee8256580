--[[ calendar_write — store, replace or remove one exclusion calendar, and move the calendars'
version, so that every scheduler reads the calendars again before it plans its next occurrence
that names one (rsched._scheduler.calendar_cache). Schedules are not touched: a change applies to
each schedule using the calendar from its next occurrence on.

KEYS[1] calendars          HASH calendar name -> its JSON document ({prefix}:calendars)
KEYS[2] calendars_version  STRING, a counter ({prefix}:calendars:version)
KEYS[3] audit              STREAM, the calendars' audit trail ({prefix}:audit, docs/audit.md)
ARGV[1] the calendar's name
ARGV[2] its JSON document (rsched._core.calendars.Calendar.to_json), or '' to remove it
ARGV[3] audit              who and from where (lua/includes/audit_ctx.lua)

Appends one record to the audit trail (action calendar_set or calendar_remove; the changes per
key of the document: dates, ranges, weekdays, description), unless the write changes nothing:
a call re-sent after a lost reply finds its own document and records nothing a second time.

Returns {OK=5, version} (version: the counter after the change) | {NOT_FOUND=-2} removing a
calendar that does not exist | {WRONG_TYPE=-6} a key holds another type | {BAD_ARGS=-7} ARGV[2]
is not a JSON object, or the audit argument is malformed (nothing written).
]]
-- @include codes
-- @include rcall
-- @include key_is
-- @include audit_ctx
-- @include audit
-- @include audit_value

local calendars, version_key = KEYS[1], KEYS[2]
local name, body = ARGV[1], ARGV[2]

-- Checked before any write: a key someone else overwrote is refused whole.
if not (key_is(calendars, 'hash') and key_is(version_key, 'string')) then return {WRONG_TYPE} end
local ctx, refused = audit_ctx(KEYS[3], ARGV[3])
if not ctx then return {refused} end
local doc = {}
if body ~= '' then
  local ok, decoded = pcall(cjson.decode, body)
  if not ok or type(decoded) ~= 'table' then return {BAD_ARGS} end
  doc = decoded
end
local old = rcall('HGET', calendars, name)
if body == '' and not old then return {NOT_FOUND} end

-- The document's keys that differ, each as its JSON text (a document someone else wrote that
-- is not JSON reads as one text); its time stamp (updated_at) left out: every write moves it.
local function changed(before, after)
  local ok, was = pcall(cjson.decode, before or '{}')
  if not ok or type(was) ~= 'table' then was = {document = before} end
  was.updated_at, after.updated_at = nil, nil
  local out = {}
  for k, v in pairs(after) do
    local a, b = cjson.encode(v), was[k] ~= nil and cjson.encode(was[k]) or nil
    if a ~= b then out[k] = {audit_value(b), audit_value(a)} end
  end
  for k, v in pairs(was) do
    if after[k] == nil then out[k] = {audit_value(cjson.encode(v)), cjson.null} end
  end
  return out
end

if old ~= body then
  local action = body == '' and 'calendar_remove' or 'calendar_set'
  audit(ctx, action, name, nil, nil, changed(old, doc))
end
if body ~= '' then rcall('HSET', calendars, name, body) else rcall('HDEL', calendars, name) end
local ok, version = pcall(rcall, 'INCR', version_key)
if not ok then -- not a whole number: someone else wrote it; start the count again
  rcall('SET', version_key, '1')
  version = 1
end
return {OK, version}

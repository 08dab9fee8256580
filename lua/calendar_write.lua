--[[ calendar_write — store, replace or remove one exclusion calendar, and move the calendars'
version, so that every scheduler reads the calendars again before it plans its next occurrence
that names one (rsched._scheduler.calendar_cache). Schedules are not touched: a change applies to
each schedule using the calendar from its next occurrence on.

KEYS[1] calendars          HASH calendar name -> its JSON document ({prefix}:calendars)
KEYS[2] calendars_version  STRING, a counter ({prefix}:calendars:version)
ARGV[1] the calendar's name
ARGV[2] its JSON document (rsched._core.calendars.Calendar.to_json), or '' to remove it

Returns {OK=5, version} (version: the counter after the change) | {NOT_FOUND=-2} removing a
calendar that does not exist | {WRONG_TYPE=-6} a key holds another type | {BAD_ARGS=-7} ARGV[2]
is not a JSON object (nothing written).
]]
-- @include codes
-- @include rcall
-- @include key_is

local calendars, version_key = KEYS[1], KEYS[2]
local name, body = ARGV[1], ARGV[2]

-- Checked before any write: a key someone else overwrote is refused whole.
if not (key_is(calendars, 'hash') and key_is(version_key, 'string')) then return {WRONG_TYPE} end
if body ~= '' then
  local ok, doc = pcall(cjson.decode, body)
  if not ok or type(doc) ~= 'table' then return {BAD_ARGS} end
  rcall('HSET', calendars, name, body)
elseif rcall('HDEL', calendars, name) == 0 then
  return {NOT_FOUND}
end
local ok, version = pcall(rcall, 'INCR', version_key)
if not ok then -- not a whole number: someone else wrote it; start the count again
  rcall('SET', version_key, '1')
  version = 1
end
return {OK, version}

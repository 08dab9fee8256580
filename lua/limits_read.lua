--[[ limits_read — a page of the limit keys in use and of the operators' numbers, for
Client.limits / `rsched limits`; or one key's row, for Client.limit (reads only).

A key is in use while a job holds it, waits on it, or started in its rate window. Each row has
the numbers in force (an operator's, for the key or the longest pattern matching it, over the
declared ones), the holders, the waiting jobs and the starts in the window ending now. The
first page also lists the operators' numbers for keys not in use and for patterns (those the
glob matches). Given one key (ARGV[4]), the answer is that key's row alone, in use or not
(one not in use: its numbers in force, nothing held, waiting or started), without a scan.

KEYS[1]..KEYS[11] the limits' keys (rsched._core.keys.Keys.limits; lua/includes/limit_keys.lua)
ARGV[1] cursor (HSCAN's; '0' first)   ARGV[2] rows per page (about)   ARGV[3] glob ('' = all)
ARGV[4] one key ('' = a page; ARGV[1..3] are then not used)

Returns JSON [next cursor ('0': last page), [ [key, template, concurrency|null, rate count,
rate ms, holders, waiting, starts, override object|null], …] ].
]]
-- @include rcall
-- @include now_ms
-- @include limit_keys
-- @include limit_numbers

local L = limit_keys(1)
local cursor, count, match, one = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4] or ''
local now = now_ms()
local cache = {}

local function override_of(key)
  local raw = rcall('HGET', L.set, key)
  if not raw then
    for _, p in ipairs(cache.patterns or {}) do
      if string.find(key, p[1]) then
        raw = p[2]
        break
      end
    end
  end
  if not raw then return cjson.null end
  local ok, doc = pcall(cjson.decode, raw)
  if ok and type(doc) == 'table' then return doc end
  return cjson.null
end

local function row(key, decl)
  local tmpl, c, n, ms = string.match(decl or '', '^([^%z]*)%z([^%z]*)%z([^%z]*)%z([^%z]*)$')
  c, n, ms = limit_numbers(L, key, tonumber(c or ''), tonumber(n or '') or 0,
                           tonumber(ms or '') or 0, cache)
  local starts = 0
  if n > 0 and ms > 0 then
    starts = rcall('ZLEXCOUNT', L.starts, '[' .. key .. '\0' .. string.format('%013d', now - ms + 1),
                   '(' .. key .. '\1')
  end
  local waiting = rcall('ZLEXCOUNT', L.waiting, '[' .. key .. '\0', '(' .. key .. '\1')
  local held = tonumber(rcall('HGET', L.held, key) or 0)
  if c == nil then c = cjson.null end
  return {key, tmpl or '', c, n, ms, held, waiting, starts, override_of(key)}
end

if one ~= '' then return cjson.encode({'0', {row(one, rcall('HGET', L.keys, one))}}) end

local args = {'HSCAN', L.keys, cursor, 'COUNT', count}
if match ~= '' then
  args[#args + 1] = 'MATCH'
  args[#args + 1] = match
end
local scan = rcall(unpack(args))
local rows = {}
local seen = {}
for i = 1, #scan[2], 2 do
  seen[scan[2][i]] = true
  rows[#rows + 1] = row(scan[2][i], scan[2][i + 1])
end
-- The fields of a small hash the glob matches (HSCAN's MATCH: the same globs as the keys').
local function matching(hash)
  if match == '' then return rcall('HKEYS', hash) end
  local out, at = {}, '0'
  repeat
    local page = rcall('HSCAN', hash, at, 'MATCH', match, 'COUNT', 1000)
    at = page[1]
    for i = 1, #page[2], 2 do out[#out + 1] = page[2][i] end
  until at == '0'
  return out
end

if cursor == '0' then
  for _, k in ipairs(matching(L.set)) do
    if not seen[k] and rcall('HEXISTS', L.keys, k) == 0 then rows[#rows + 1] = row(k, nil) end
    seen[k] = true
  end
  for _, p in ipairs(matching(L.patterns)) do
    if not seen[p] then
      local r = row(p, nil)
      r[9] = cjson.decode(rcall('HGET', L.patterns, p))
      rows[#rows + 1] = r
      seen[p] = true
    end
  end
end
if #rows == 0 then return cjson.encode({scan[1], {}}) end
return cjson.encode({scan[1], rows})

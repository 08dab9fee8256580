-- Include: common functions, inlined (by rsched._redis.scripts) into every script that names it.
-- Defines: rcall, int_text(n), now_ms(), hist(key, cap, json), hist_first(key, cap, json), pcall_read(...),
-- op_replay(key, id), op_store(key, id, result), key_is(key, want), json_str(s) and
-- version_parts(version).

local rcall = redis.call

-- Decimal text of an integer (a time in ms, a count). string.format costs ~1 µs a call and a
-- batch formats the same few values (now, its lateness, a marker's expiry) over and over:
-- remember them.
local INT_TEXT = {}
local function int_text(n)
  local s = INT_TEXT[n]
  if not s then
    s = string.format('%d', n)
    INT_TEXT[n] = s
  end
  return s
end

-- Server time in ms: due-ness must not depend on any client's clock.
local function now_ms()
  local t = rcall('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Push one JSON event on a capped history list (newest first). LPUSH returns the length, so
-- the trim costs a call only when the list is over its cap.
local function hist(key, cap, json)
  if rcall('LPUSH', key, json) > cap then rcall('LTRIM', key, 0, cap - 1) end
end

-- A reply of the wrong type (someone other than rsched wrote the key) is an answer for the
-- caller to act on; any other error (out of memory, ...) still aborts the script.
local function wrong_type(reply)
  if type(reply) == 'table' and reply['err'] then
    if string.find(reply['err'], 'WRONGTYPE', 1, true) then return true end
    error(reply)
  end
  return false
end

-- hist() as the *first* write of an item, to a key whose type was not checked: a wrong type
-- fails the LPUSH itself, which writes nothing, so the item can still be refused whole. One
-- call instead of a TYPE check followed by the push. Returns false for a wrong type.
local function hist_first(key, cap, json)
  local len = redis.pcall('LPUSH', key, json)
  if wrong_type(len) then return false end
  if len > cap then rcall('LTRIM', key, 0, cap - 1) end
  return true
end

-- A read that doubles as the type check of its key: nil when the key holds another type.
local function pcall_read(...)
  local reply = redis.pcall(...)
  if wrong_type(reply) then return nil end
  return reply
end

-- Client writes carry a request id so that a command re-sent after a lost reply (redis-py
-- retries on connection errors) returns the first result instead of applying twice. Results
-- are kept in one hash per minute of the client's clock ({p}:ops:<minute>, which only names the
-- bucket), alive until OP_TTL_MS after its last write: a key per write would double the
-- keyspace's table during a bulk create, and the table does not shrink back (~10 bytes a
-- schedule for good).
local OP_TTL_MS = 300000

local function op_replay(key, id)
  local prev = rcall('HGET', key, id)
  if prev then return cjson.decode(prev) end
  return nil
end

local function op_store(key, id, result)
  rcall('HSET', key, id, cjson.encode(result))
  rcall('PEXPIRE', key, OP_TTL_MS)
  return result
end

-- True when the key is absent or of the wanted type; lets a script refuse a key someone else
-- overwrote *before* its first write instead of failing halfway.
local function key_is(key, want)
  local t = rcall('TYPE', key)['ok']
  return t == 'none' or t == want
end

-- Values written into hand-built JSON: ids and names are restricted to [A-Za-z0-9._:-] by the
-- client, but a hash edited by hand could hold anything, so escape through cjson.
local function json_str(s)
  return cjson.encode(s)
end

-- A schedule hash's "version" field is "<generation>:<created_at>": returns the generation (a
-- number) and the creation time (a string of ms), or nil when the field is absent or malformed.
local function version_parts(version)
  local gen, created = string.match(version or '', '^(%d+):(%d+)$')
  if not gen then return nil end
  return tonumber(gen), created
end

-- Include: common functions, inlined (by rsched._lua) into every script that names it.
-- Defines: rcall, now_ms(), hist(key, cap, json), op_replay(key), op_store(key, ttl, result),
-- key_is(key, want) and json_str(s).

local rcall = redis.call

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

-- Client writes carry an operation key so that a command re-sent after a lost reply (redis-py
-- retries on connection errors) returns the first result instead of applying twice.
local function op_replay(key)
  local prev = rcall('GET', key)
  if prev then return cjson.decode(prev) end
  return nil
end

local function op_store(key, ttl, result)
  rcall('SET', key, cjson.encode(result), 'PX', ttl)
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

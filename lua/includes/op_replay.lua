-- Include: op_replay(key, id) — the result a client write with request id `id` already returned
-- (op_store), or nil when it has not run yet.
--
-- Client writes carry a request id so that a command re-sent after a lost reply (redis-py
-- retries on connection errors) returns the first result instead of applying twice.
-- @include rcall

local function op_replay(key, id)
  local prev = rcall('HGET', key, id)
  if prev then return cjson.decode(prev) end
  return nil
end

-- Include: op_store(key, id, result) — keep the result of the client write with request id `id`
-- for op_replay, and return it.
-- @include rcall

-- Results are kept in one hash per minute of the client's clock ({p}:ops:<minute>, which only
-- names the bucket), alive until OP_TTL_MS after its last write: a key per write would double
-- the keyspace's table during a bulk create, and the table does not shrink back (~10 bytes a
-- schedule for good).
local OP_TTL_MS = 300000

local function op_store(key, id, result)
  rcall('HSET', key, id, cjson.encode(result))
  rcall('PEXPIRE', key, OP_TTL_MS)
  return result
end

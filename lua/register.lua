--[[ register — a worker's registry heartbeat: it is alive, and what it runs.

One call per heartbeat period: the worker's record (JSON, written whole) with a TTL of a few
heartbeats, and its score (Redis time) in the registry. A worker that dies stops calling: its
record expires and readers skip it; ids whose record is long gone are pruned here.

KEYS[1] workers  {p}:workers (ZSET worker id -> last heartbeat, ms)
KEYS[2] record   {p}:worker:<id> (STRING, JSON)
ARGV[1] worker id
ARGV[2] record   the worker's JSON record
ARGV[3] ttl_ms   the record's time to live (a few heartbeats)
ARGV[4] prune_ms ids not seen for this long are removed from the registry

Returns {OK=5, now ms} | {WRONG_TYPE=-6} when a key holds another type (nothing written).
]]
-- @include codes
-- @include rcall
-- @include int_text
-- @include key_is
-- @include now_ms

local workers, record = KEYS[1], KEYS[2]
local id, json, ttl, prune = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])

if not (key_is(workers, 'zset') and key_is(record, 'string')) then return {WRONG_TYPE} end
local now = now_ms()
rcall('ZADD', workers, now, id)
rcall('SET', record, json, 'PX', ttl)
rcall('ZREMRANGEBYSCORE', workers, '-inf', '(' .. int_text(now - prune))
return {OK, int_text(now)}

-- Include: run_index(runs, id, labels) — index a labelled record of the runs log (run_log.lua):
-- its entry id `id` is added, as the id of an entry of its own, to the STREAM
-- {p}:runs:label:<k>=<v> of each pair of `labels` ("k=v,k=v"), and each pair to the SET
-- {p}:runs:labels of the pairs that have an index (what the retention trims). A stream rather
-- than a sorted set: the log's ids only grow, so each index is in the log's order as written,
-- reads and trims by the same ids (XREVRANGE, XTRIM MINID), and costs a few bytes an entry
-- (one constant field, compressed against the node's first entry) where a sorted set's costs
-- over 100. Only the keys the caller declared in KEYS are written (rsched._store.runs_log
-- .run_index_keys: an older caller that declares none indexes nothing, its records are still
-- logged); a key of another type (or an index ahead of the log, written by hand) is left
-- alone. KEYS is read once per script call, and only when a labelled record is logged: a call
-- without one pays nothing.
--
-- run_index_key(runs, key): whether `key` is one of those index keys (a script whose optional
-- keys follow the runs log tells them from what else may follow).
-- @include rcall
-- @include declared

local function run_index(runs, id, labels)
  local pairs_key = runs .. ':labels'
  local registry = declared(pairs_key)
  for pair in string.gmatch(labels, '[^,]+') do
    local key = runs .. ':label:' .. pair
    if declared(key) then
      redis.pcall('XADD', key, id, 'i', '1')
      if registry then redis.pcall('SADD', pairs_key, pair) end
    end
  end
end

local function run_index_key(runs, key)
  return runs ~= nil and key ~= nil and string.sub(key, 1, #runs + 1) == runs .. ':'
end

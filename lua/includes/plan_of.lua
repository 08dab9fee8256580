-- Include: plan_of(overlap, queue, max_runs, opts, buffer_limit, debounce, labels) — the plan of a
-- schedule's spec (what decides what a fire writes; rsched._core.fire_plan.FireSpec) from those
-- field values (false/nil = absent): {overlap=, queue=, max_runs= (number or false), opts= (JSON
-- text or false when all default), ttl= (run marker lifetime, ms), buffer_limit= (number, 100
-- when absent), debounce= (ms, a number > 0, or false), labels= (the schedule's "k=v,k=v", which
-- its jobs carry, or false)}, or nil when max_runs, buffer_limit or debounce is not such a
-- number, opts not a JSON object, or labels holds a character no label has (rsched._core.rules;
-- a pair is checked in full by whoever reads it back). The caller of a plan with a debounce
-- sets its delayed= (the queue's delayed set; debounce_fire.lua).
-- @include marker_ttl

local DEFAULT_BUFFER_LIMIT = 100
local DEFAULT_TTL = marker_ttl(nil, nil, nil)

local function plan_of(overlap, queue, max_runs, opts, buffer_limit, debounce, labels)
  if labels == '' then labels = false end
  if labels and not string.match(labels, '^[%w_.:@/+=,-]+$') then return nil end
  if debounce then
    debounce = tonumber(debounce)
    if not debounce or debounce <= 0 then return nil end
  end
  if max_runs then
    max_runs = tonumber(max_runs)
    if not max_runs then return nil end
  end
  if buffer_limit then
    buffer_limit = tonumber(buffer_limit)
    if not buffer_limit then return nil end
  end
  local ttl = DEFAULT_TTL
  if opts == '{}' then opts = false end
  if opts then
    local ok, o = pcall(cjson.decode, opts)
    -- A JSON array decodes to a table too.
    if not ok or type(o) ~= 'table' or string.byte(opts) ~= 123 then return nil end
    ttl = marker_ttl(o.timeout_s, o.max_retries, o.retry_max_s)
  end
  return {overlap = overlap or 'skip', queue = queue or 'default', max_runs = max_runs or false,
          opts = opts or false, ttl = ttl, buffer_limit = buffer_limit or DEFAULT_BUFFER_LIMIT,
          debounce = debounce or false, labels = labels or false}
end

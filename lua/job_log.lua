--[[ job_log — append what running handlers said (job.log, logging records, job.set_progress)
to their jobs' logs, in one call for every run of one partition with news.

Each run is two keys: its attempt's log, a list of JSON lines ({p}:joblog:<execution id>:<attempt>,
oldest first), and its job's progress hash ({p}:progress:<execution id>: fraction, note, at,
attempt of the latest progress; bytes:<attempt> the bytes its attempt's log holds, and
last:<attempt> the token of the last batch applied to it). A log keeps its newest max_lines
lines and at most max_bytes bytes (older lines are popped); both keys expire ttl_ms after the
last write, as the job's result does. Safe to run twice: a run's batch whose token is already
applied appends nothing again. A run whose keys hold another type is skipped (nothing written to
it); the others are written.

KEYS[2i-1] log of run i   KEYS[2i] progress hash of run i
ARGV[1] max_lines   ARGV[2] max_bytes   ARGV[3] ttl_ms
then per run, in KEYS order: attempt, token (unique per batch), fraction ('' when no progress
came), note, at (ms of the progress), n (lines), then its n lines (each at most max_bytes)

Returns {OK=5, skipped} (skipped: runs whose keys hold another type) | {BAD_ARGS=-7} when the
arguments are malformed (nothing written)
]]
-- @include codes
-- @include rcall
-- @include key_is

local maxLines = tonumber(ARGV[1])
local maxBytes = tonumber(ARGV[2])
local ttl = tonumber(ARGV[3])

local function parse_runs()
  local runs, at = {}, 4
  for i = 1, #KEYS / 2 do
    local attempt, n = tonumber(ARGV[at]), tonumber(ARGV[at + 5])
    if not (attempt and attempt >= 1 and n and n >= 0 and ARGV[at + 1] and ARGV[at + 1] ~= ''
            and (ARGV[at + 2] == '' or tonumber(ARGV[at + 2])) and tonumber(ARGV[at + 4])) then
      return nil
    end
    runs[i] = {log = KEYS[2 * i - 1], meta = KEYS[2 * i], attempt = ARGV[at],
               token = ARGV[at + 1], fraction = ARGV[at + 2], note = ARGV[at + 3],
               at = ARGV[at + 4], first = at + 6, n = n}
    at = at + 6 + n
  end
  if at ~= #ARGV + 1 then return nil end
  return runs
end

local function append(run)
  local tokenField, bytesField = 'last:' .. run.attempt, 'bytes:' .. run.attempt
  if rcall('HGET', run.meta, tokenField) == run.token then return end
  local total = 0
  if rcall('EXISTS', run.log) == 1 then
    total = tonumber(rcall('HGET', run.meta, bytesField)) or 0
  end
  local length = 0
  for i = run.first, run.first + run.n - 1 do
    total = total + #ARGV[i]
    length = rcall('RPUSH', run.log, ARGV[i])
  end
  while length > maxLines or (total > maxBytes and length > 1) do
    total = total - #rcall('LPOP', run.log)
    length = length - 1
  end
  rcall('HSET', run.meta, bytesField, total, tokenField, run.token)
  rcall('PEXPIRE', run.log, ttl)
end

if not (maxLines and maxLines >= 1 and maxBytes and maxBytes >= 1 and ttl and ttl >= 1
        and #KEYS % 2 == 0) then
  return {BAD_ARGS}
end
local runs = parse_runs()
if not runs then return {BAD_ARGS} end
local skipped = 0
for _, run in ipairs(runs) do
  run.ok = key_is(run.log, 'list') and key_is(run.meta, 'hash')
  if not run.ok then skipped = skipped + 1 end
end
for _, run in ipairs(runs) do
  if run.ok then
    if run.fraction ~= '' then
      rcall('HSET', run.meta, 'fraction', run.fraction, 'note', run.note, 'at', run.at,
            'attempt', run.attempt)
    end
    if run.n > 0 then append(run) end
    rcall('PEXPIRE', run.meta, ttl)
  end
end
return {OK, skipped}

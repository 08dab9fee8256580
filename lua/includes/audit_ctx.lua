-- Include: audit_ctx(key, arg) — the audit context of a script call (docs/audit.md) from its
-- one argument (rsched._core.audit.Author.arg: a JSON object {s: source, w: actor, a: action,
-- n: the stream's cap, h: specs kept per schedule}); or nil and the code to refuse the call with
-- before its first write (a change is never made without its record): WRONG_TYPE when the audit
-- stream `key` holds another type, BAD_ARGS when the argument is malformed.
-- @include codes
-- @include key_is

local function audit_ctx(key, arg)
  local ok, doc = pcall(cjson.decode, arg or '')
  if not key_is(key, 'stream') then return nil, WRONG_TYPE end
  if not ok or type(doc) ~= 'table' then return nil, BAD_ARGS end
  local actor, source, action = doc.w, doc.s, doc.a
  if actor ~= nil and (type(actor) ~= 'string' or not string.match(actor, '^[%w%._@:+/%-]+$')
                       or #actor > 64) then
    return nil, BAD_ARGS
  end
  if type(source) ~= 'string' or #source == 0 or #source > 210 then return nil, BAD_ARGS end
  if action ~= nil and type(action) ~= 'string' then return nil, BAD_ARGS end
  local cap, keep = tonumber(doc.n), tonumber(doc.h) or 0
  if not cap or cap < 1 or keep < 0 then return nil, BAD_ARGS end
  return {key = key, actor = actor or cjson.null, source = source, action = action, cap = cap,
          keep = math.floor(keep)}
end

-- Include: audit(ctx, action, id, before, after, changes, note, ids) — append one record to the
-- audit stream of `ctx` (audit_ctx.lua): ctx.action when the caller named one (a rollback, a
-- schedules file's sync), else `action`; the id; the actor and source; the generation before
-- and after (nil: none); `changes`, a table field -> {old, new} (nil or empty: none); `note`
-- (nil: none); `ids`, a list of every id a bulk create's record stands for (nil: `id` alone).
-- XADD MAXLEN ~ ctx.cap * a <JSON array> (rsched._core.audit.AUDIT_FIELDS); the entry id is the
-- time of the change. Nothing when ctx is nil.
-- @include rcall

local function audit(ctx, action, id, before, after, changes, note, ids)
  if not ctx then return end
  local c = cjson.null
  if changes and next(changes) then c = changes end
  local record = {ctx.action or action, id, ctx.actor, ctx.source, before or cjson.null,
                  after or cjson.null, c, note or cjson.null}
  if ids then record[9] = ids end
  -- Trailing nulls left out (readers take a missing value as null): a creation's record is
  -- then ~10 bytes shorter.
  while record[#record] == cjson.null do record[#record] = nil end
  rcall('XADD', ctx.key, 'MAXLEN', '~', ctx.cap, '*', 'a', cjson.encode(record))
end

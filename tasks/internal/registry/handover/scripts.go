package handover

import (
	"github.com/redis/go-redis/v9"

	"github.com/bgjobs/bgjobs/tasks/internal/registry"
)

// The hand-over scripts. Times are unix milliseconds passed in by the
// caller, so tests can inject a clock.

// luaHandover is the one flip of a row to delivered, by a caller's
// hand-over nonce (see undoHandoverCmd). A call whose nonce was voided
// (its caller gave up) flips nothing; a retry of the same call (go-redis
// resends a pipeline) finds its own record and answers the same.
//
// voided(void) -> true when the caller behind this nonce is gone
// handover(k, nonce, now, retention[, replay]) marks row k delivered (and,
// for a drain with an idempotency key, readable by its repeat until replay)
// record(taken, ids, nonce, ttl) keeps what this nonce took, for its undo
const luaHandover = registry.LuaTerminal + `
local function voided(void)
  return redis.call('EXISTS', void) == 1
end
local function handover(k, nonce, now, retention, replay)
  local set = {'notified', '1', 'notified_at', now}
  if nonce ~= '' then set[#set + 1] = 'taken_by'; set[#set + 1] = nonce end
  if replay then set[#set + 1] = 'replay_until'; set[#set + 1] = replay end
  redis.call('HSET', k, unpack(set))
  redis.call('EXPIRE', k, retention)
end
local function record(taken, ids, nonce, ttl)
  if nonce ~= '' and #ids > 0 then redis.call('SET', taken, cjson.encode(ids), 'EX', ttl) end
end
`

// drainCmd hands over every ended, unnotified job of a session, oldest
// completion first, and marks each notified in the same step: the
// exactly-once flip. With an idempotency key, the ids handed over are kept
// for ARGV[3] seconds and a repeat returns the same rows without flipping
// anything new (each row handed over is marked replay_until, so purge
// leaves it for the repeat). With ARGV[6] = "1", a report the settle marked hold_index
// (it will be cut, with a pointer to memory_recall) stays pending until it
// is searchable, but never longer than the grace: after that it goes out
// whole rather than wait on an index that is not running. A job a caller
// still waits for (wait_ms) stays pending too. The flip carries the
// caller's hand-over nonce (luaHandover): a drain whose caller gave up
// before it ran flips nothing, and one that ran is undone.
//
// KEYS[1] -> session pending zset
// KEYS[2] -> drain idempotency key (unused when ARGV[2] is "0")
// KEYS[3] -> hand-over record of the nonce
// KEYS[4] -> hand-over void mark of the nonce
// ARGV[1] -> job key prefix of the session
// ARGV[2] -> "1" to use KEYS[2]
// ARGV[3] -> idempotency TTL (s), also the hand-over record's
// ARGV[4] -> retention (s) of a notified row
// ARGV[5] -> now (ms)
// ARGV[6] -> "1" to hold hold_index reports until they are indexed
// ARGV[7] -> grace cutoff (ms): reports completed before it are not held
// ARGV[8] -> hand-over nonce ("" for none)
// ARGV[9] -> page size: at most this many jobs are handed over, and at
// most four times as many pending entries read, so one drain never holds
// Redis for a whole backlog
// ARGV[10..] -> row fields to return (drainFields)
//
// Returns {more, row, row, …}: more is 1 when jobs may remain for another
// drain; each row is the requested fields, in order.
var drainCmd = redis.NewScript(luaHandover + `
local nonce = ARGV[8]
if nonce ~= '' and voided(KEYS[4]) then return {0} end
local page = tonumber(ARGV[9])
local ids
local repeated = false
local prev = nonce ~= '' and redis.call('GET', KEYS[3])
if not prev and ARGV[2] == '1' then prev = redis.call('GET', KEYS[2]) end
if prev then
  ids = cjson.decode(prev)
  repeated = true
end
local more = 0
local rows = {}
if not repeated then
  local taken = {}
  local heldn = 0
  local replay = nil
  -- a repeat of this drain reads the rows again: purge keeps them until then
  if ARGV[2] == '1' then replay = tonumber(ARGV[5]) + 1000 * tonumber(ARGV[3]) end
  local scan = redis.call('ZRANGE', KEYS[1], 0, 4 * page - 1)
  local gone = {}
  for _, id in ipairs(scan) do
    if #taken >= page then break end
    local k = ARGV[1] .. id
    local held = false
    -- one read: the hand-over's checks (1-6), then the fields to return
    local f = redis.call('HMGET', k, 'hold_index', 'report_indexed', 'completed_at', 'wait_until', 'status',
      'notified', unpack(ARGV, 10))
    if ARGV[6] == '1' then
      held = f[1] == '1' and f[2] ~= '1' and tonumber(f[3] or '0') > tonumber(ARGV[7])
    end
    if f[4] and tonumber(f[4]) > tonumber(ARGV[5]) then held = true end
    if held then heldn = heldn + 1 else gone[#gone + 1] = id end
    local st = f[5]
    if not held and st and terminal(st) and f[6] ~= '1' then
      handover(k, nonce, ARGV[5], ARGV[4], replay)
      taken[#taken + 1] = id
      rows[#rows + 1] = {unpack(f, 7, 6 + #ARGV - 9)}
    end
  end
  -- what leaves the pending set goes in one ZREM per 500, not one each
  for i = 1, #gone, 500 do
    redis.call('ZREM', KEYS[1], unpack(gone, i, math.min(i + 499, #gone)))
  end
  ids = taken
  if redis.call('ZCARD', KEYS[1]) > heldn then more = 1 end
  record(KEYS[3], ids, nonce, ARGV[3])
  if ARGV[2] == '1' then
    local enc = '[]'
    if #ids > 0 then enc = cjson.encode(ids) end
    redis.call('SET', KEYS[2], enc, 'EX', ARGV[3])
  end
end
if repeated and redis.call('ZCARD', KEYS[1]) > 0 then more = 1 end
local out = {more}
if repeated then
  for _, id in ipairs(ids) do
    local row = redis.call('HMGET', ARGV[1] .. id, unpack(ARGV, 10))
    if row[1] then out[#out + 1] = row end
  end
else
  for _, row in ipairs(rows) do out[#out + 1] = row end
end
return out
`)

// ackCmd is the drain's flip for a single job consumed another way, with
// the caller's hand-over nonce like the drain's.
//
// KEYS[1] -> job hash
// KEYS[2] -> session pending zset
// KEYS[3] -> hand-over record of the nonce
// KEYS[4] -> hand-over void mark of the nonce
// ARGV[1] -> now (ms)
// ARGV[2] -> retention (s) of a notified row
// ARGV[3] -> hand-over nonce ("" for none)
// ARGV[4] -> hand-over record TTL (s)
//
// Returns 1 if this call flipped it, 0 if it was already notified, -1 if
// there is no such row, -2 if the job has not ended, -4 if the caller is
// gone (nothing flipped).
var ackCmd = redis.NewScript(luaHandover + `
local nonce = ARGV[3]
if nonce ~= '' and voided(KEYS[4]) then return -4 end
local st = redis.call('HGET', KEYS[1], 'status')
if not st then return -1 end
if not terminal(st) then return -2 end
if redis.call('HGET', KEYS[1], 'notified') == '1' then
  if nonce ~= '' and redis.call('HGET', KEYS[1], 'taken_by') == nonce then return 1 end
  return 0
end
local id = redis.call('HGET', KEYS[1], 'id')
handover(KEYS[1], nonce, ARGV[1], ARGV[2])
redis.call('ZREM', KEYS[2], id)
record(KEYS[3], {id}, nonce, ARGV[4])
return 1
`)

// undoHandoverCmd takes back what a caller's drain, ack or wait took when
// the caller gave up (its context ended) or got an error, so no result is
// used up for a caller that never received it. It voids the nonce first:
// a call of that nonce still on its way (a stalled pipeline, a client
// retry) flips nothing when it lands. Rows go back to pending unread,
// without retention, unless something else took them since.
//
// KEYS[1] -> hand-over record of the nonce
// KEYS[2] -> hand-over void mark of the nonce
// KEYS[3] -> session pending zset
// KEYS[4] -> the drain's idempotency record (KEYS[1] when none), dropped
// if it holds what this nonce took so a repeat drains afresh
// KEYS[5] -> session outbox zset
// ARGV[1] -> job key prefix of the session
// ARGV[2] -> nonce
// ARGV[3] -> void mark TTL (s)
// ARGV[4] -> "1" to announce the rows again (a wait took them, so no
// resume went out for them)
// ARGV[5] -> now (ms)
//
// Returns how many rows went back.
var undoHandoverCmd = redis.NewScript(`
redis.call('SET', KEYS[2], '1', 'EX', ARGV[3])
local rec = redis.call('GET', KEYS[1])
if not rec then return 0 end
local n = 0
for _, id in ipairs(cjson.decode(rec)) do
  local k = ARGV[1] .. id
  local f = redis.call('HMGET', k, 'taken_by', 'notified', 'completed_at')
  if f[1] == ARGV[2] and f[2] == '1' then
    redis.call('HSET', k, 'notified', '0')
    redis.call('HDEL', k, 'notified_at', 'taken_by', 'replay_until')
    redis.call('PERSIST', k)
    redis.call('ZADD', KEYS[3], f[3] or ARGV[5], id)
    if ARGV[4] == '1' then redis.call('ZADD', KEYS[5], ARGV[5], 'r|' .. id) end
    n = n + 1
  end
end
if KEYS[4] ~= KEYS[1] and redis.call('GET', KEYS[4]) == rec then redis.call('DEL', KEYS[4]) end
redis.call('DEL', KEYS[1])
return n
`)

// releaseWaitCmd ends a caller's wait on a job (wait_ms). If the caller took
// the result, the job is marked notified and its held announcement dropped;
// if it let go (budget spent, connection gone), the held announcement
// becomes an ordinary one for the pump, and the job drains as usual.
//
// A take carries the caller's hand-over nonce like a drain's.
//
// KEYS[1] -> job hash
// KEYS[2] -> session pending zset
// KEYS[3] -> session outbox zset
// KEYS[4] -> hand-over record of the nonce
// KEYS[5] -> hand-over void mark of the nonce
// ARGV[1] -> "take" or "release"
// ARGV[2] -> now (ms)
// ARGV[3] -> retention (s) of a notified row
// ARGV[4] -> hand-over nonce ("" for none)
// ARGV[5] -> hand-over record TTL (s)
//
// Returns 1 if the caller took the result, 2 if an announcement was handed
// back to the pump, 0 otherwise.
var releaseWaitCmd = redis.NewScript(luaHandover + `
local id = redis.call('HGET', KEYS[1], 'id')
if not id then return 0 end
local nonce = ARGV[4]
local take = ARGV[1] == 'take' and not (nonce ~= '' and voided(KEYS[5]))
if take and nonce ~= '' and redis.call('HGET', KEYS[1], 'taken_by') == nonce then return 1 end
redis.call('HDEL', KEYS[1], 'wait_until')
local held = redis.call('ZSCORE', KEYS[3], 'w|' .. id)
if take and terminal(redis.call('HGET', KEYS[1], 'status'))
   and redis.call('HGET', KEYS[1], 'notified') ~= '1' then
  handover(KEYS[1], nonce, ARGV[2], ARGV[3])
  redis.call('ZREM', KEYS[2], id)
  redis.call('ZREM', KEYS[3], 'w|' .. id)
  record(KEYS[4], {id}, nonce, ARGV[5])
  return 1
end
if held then
  redis.call('ZREM', KEYS[3], 'w|' .. id)
  redis.call('ZADD', KEYS[3], held, 'r|' .. id)
  return 2
end
return 0
`)

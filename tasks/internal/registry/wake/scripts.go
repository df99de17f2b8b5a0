package wake

import "github.com/redis/go-redis/v9"

// The session wake-up scripts. Times are unix milliseconds passed in by
// the caller, so tests can inject a clock.

// beginDeliveryCmd decides, for a resume about to be sent, whether it goes:
// not while the session is inside a turn (the trigger is then held, never
// dropped, for the coalesced nudge that idle or the lease's lapse sends),
// not if it was sent before (a worker that died after sending, before
// asynq recorded the task done, runs it again), and only one of a session
// at a time (the delivery lock, which the sender keeps until endDeliveryCmd).
//
// KEYS[1] -> session busy lease (string: lease expiry ms)
// KEYS[2] -> session held zset (trigger → when it was held, ms)
// KEYS[3] -> the resume's sent mark
// KEYS[4] -> session delivery lock
// ARGV[1] -> now (ms)
// ARGV[2] -> trigger (job or batch id)
// ARGV[3] -> message id (the lock's holder)
// ARGV[4] -> lock TTL (ms), should the sender die mid-send
//
// Returns 0 if the lock is taken and the resume may go, 1 if held (busy),
// 2 if another resume of the session is being sent, 3 if it was sent.
var beginDeliveryCmd = redis.NewScript(`
local lease = redis.call('GET', KEYS[1])
if lease and tonumber(lease) > tonumber(ARGV[1]) then
  redis.call('ZADD', KEYS[2], ARGV[1], ARGV[2])
  return 1
end
if redis.call('EXISTS', KEYS[3]) == 1 then return 3 end
if not redis.call('SET', KEYS[4], ARGV[3], 'NX', 'PX', ARGV[4]) then return 2 end
return 0
`)

// endDeliveryCmd ends a delivery beginDeliveryCmd let go: the resume is
// marked sent if it was, and the lock freed only if this sender still
// holds it, so a delivery that outlived its lock never frees another's.
//
// KEYS[1] -> the resume's sent mark
// KEYS[2] -> session delivery lock
// ARGV[1] -> message id (the lock's holder)
// ARGV[2] -> how long the sent mark is kept (ms); "0" when not sent
//
// Returns 1 if the lock was freed, 0 if it had passed on or expired.
var endDeliveryCmd = redis.NewScript(`
if ARGV[2] ~= '0' then redis.call('SET', KEYS[1], '1', 'PX', ARGV[2]) end
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return 0 end
return redis.call('DEL', KEYS[2])
`)

// busyCmd starts or extends a session's busy lease.
//
// KEYS[1] -> session busy lease
// ARGV[1] -> lease expiry (ms)
// ARGV[2] -> key TTL (s): a little past the lease, so the key cleans itself up
var busyCmd = redis.NewScript(`
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
return 1
`)

// idleCmd ends a session's busy lease — on an explicit idle, or when the
// lapse timer finds the lease expired — and, if nudges were held and
// something is still undrained, records one coalesced nudge in the outbox:
//
//	f|<latest held trigger>
//
// KEYS[1] -> session busy lease
// KEYS[2] -> session held zset
// KEYS[3] -> session pending zset
// KEYS[4] -> session outbox zset
// ARGV[1] -> now (ms)
// ARGV[2] -> "lapse" to act only if the lease has expired, "idle" otherwise
//
// Returns {ended, folded}: ended 1 if the session is now idle, folded 1 if a
// coalesced nudge was recorded.
var idleCmd = redis.NewScript(`
local lease = redis.call('GET', KEYS[1])
if ARGV[2] == 'lapse' and lease and tonumber(lease) > tonumber(ARGV[1]) then
  return {0, 0}
end
redis.call('DEL', KEYS[1])
local latest = redis.call('ZRANGE', KEYS[2], -1, -1)
redis.call('DEL', KEYS[2])
if #latest == 0 or redis.call('ZCARD', KEYS[3]) == 0 then return {1, 0} end
redis.call('ZADD', KEYS[4], ARGV[1], 'f|' .. latest[1])
return {1, 1}
`)

// luaStormWindow reads and writes a session's storm window, kept as
// "<end>:<hard end>:<cap>" (ms, ms, ms): completions in a burst push its end
// out by the base window each, never past its hard end, and each window
// that merges something lets the next one grow to twice its cap. A window
// written as a bare end (before windows grew) reads as one of base size.
const luaStormWindow = `
local function readWindow(key, base)
  local v = redis.call('GET', key)
  if not v then return 0, 0, base end
  local till, limit, cap = string.match(v, '^(%d+):(%d+):(%d+)$')
  if not till then
    local t = tonumber(v) or 0
    return t, t, base
  end
  return tonumber(till), tonumber(limit), tonumber(cap)
end
local function writeWindow(key, till, limit, cap)
  redis.call('SET', key, till .. ':' .. limit .. ':' .. cap, 'PX', limit - till + cap + 60000)
end
`

// stormCmd is the resume storm guard's gate for a singleton resume: the
// first of a session goes at once and opens a window; those that follow
// within it wait in the session's storm queue for one merged nudge at the
// window's end. Each one queued keeps the window open a base window longer
// (a burst is one window, not one per base window), up to the window's
// cap. The decision is kept in the job's row, so an outbox entry pumped
// twice (a settle's own pump racing a sweep) gets the same answer and a
// job is never both sent alone and merged, nor merged twice.
//
// KEYS[1] -> session storm window (see luaStormWindow; the key outlives it
// by a minute, to clean itself up)
// KEYS[2] -> session storm queue zset (job id → ms)
// KEYS[3] -> job hash (field storm = "<generation>:now" | "<generation>:merged")
// ARGV[1] -> job id
// ARGV[2] -> now (ms)
// ARGV[3] -> base window (ms)
// ARGV[4] -> the job's generation (a retried job's new outcome decides anew)
// ARGV[5] -> a new window's cap (ms)
//
// Returns 1 to send now (the window is opened, or this job was already let
// through), or the window's remaining ms (≥ 0) when the job was queued
// behind it, now or before — negated, as -1 - remaining.
var stormCmd = redis.NewScript(luaStormWindow + `
local now, base = tonumber(ARGV[2]), tonumber(ARGV[3])
local till, limit, cap = readWindow(KEYS[1], base)
local prev = redis.call('HGET', KEYS[3], 'storm')
if prev == ARGV[4] .. ':now' then return 1 end
if prev == ARGV[4] .. ':merged' then return -1 - math.max(0, till - now) end
if till > now then
  redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
  redis.call('HSET', KEYS[3], 'storm', ARGV[4] .. ':merged')
  till = math.max(till, math.min(now + base, limit))
  writeWindow(KEYS[1], till, limit, cap)
  return -1 - (till - now)
end
writeWindow(KEYS[1], now + base, now + tonumber(ARGV[5]), tonumber(ARGV[5]))
redis.call('HSET', KEYS[3], 'storm', ARGV[4] .. ':now')
return 1
`)

// stormFlushCmd ends a storm window: everything queued behind it becomes
// one outbox entry, c|<id>,<id>,…, and a new window opens, with twice the
// cap (up to ARGV[4]), so that what follows merges again and a burst that
// goes on is told of in ever fewer nudges. A window with nothing queued is
// left to expire: the next completion opens a fresh one and goes at once.
//
// KEYS[1] -> session storm window
// KEYS[2] -> session storm queue zset
// KEYS[3] -> session outbox zset
// ARGV[1] -> now (ms)
// ARGV[2] -> base window (ms)
// ARGV[3] -> "1" to flush even if the window is still open (a sweep after a crash)
// ARGV[4] -> the largest cap a window may grow to (ms)
//
// Returns {entry, ms}: the outbox entry recorded and the new window's
// length, {"", 0} if there was nothing to merge, or {"", ms} while the
// window is still open for ms.
var stormFlushCmd = redis.NewScript(luaStormWindow + `
local now, base = tonumber(ARGV[1]), tonumber(ARGV[2])
local till, limit, cap = readWindow(KEYS[1], base)
if ARGV[3] ~= '1' and till > now then return {'', till - now} end
local ids = redis.call('ZRANGE', KEYS[2], 0, -1)
if #ids == 0 then return {'', 0} end
redis.call('DEL', KEYS[2])
local entry = 'c|' .. table.concat(ids, ',')
redis.call('ZADD', KEYS[3], ARGV[1], entry)
cap = math.min(cap * 2, tonumber(ARGV[4]))
writeWindow(KEYS[1], now + base, now + cap, cap)
return {entry, base}
`)

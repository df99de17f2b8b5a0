package registry

import "github.com/redis/go-redis/v9"

// Every state change of a job is one of these scripts: each reads the current
// status first (compare-and-set), so a re-run, a late worker or a race can
// never move a terminal job or count it twice. Times are unix milliseconds
// passed in by the caller, so tests can inject a clock.

// LuaTerminal is prepended to scripts that need to recognise terminal states.
const LuaTerminal = `
local function terminal(st)
  return st == 'completed' or st == 'failed' or st == 'cancelled'
end
`

// LuaRun defines latestRun(run, generation, attempts): whether the run
// "<generation>:<attempt>" (as bgjobs.Run, "" for any) is the row's latest,
// given the row's generation and attempts fields (nil reads as 0).
const LuaRun = `
local function latestRun(run, gen, attempts)
  return run == '' or run == (gen or '0') .. ':' .. (attempts or '0')
end
`

// startCmd moves a job to running when a worker begins it.
//
// KEYS[1] -> job hash
// ARGV[1] -> now (ms)
//
// Returns {code, attempts}: code 1 = queued → running; 2 = was already
// running (a re-run after a lost lease), still running; 0 = terminal, do
// not run; -1 = no such row. The row itself is read by a plain HGETALL
// sent just behind the script (Store.Start): handing a whole hash back
// through Lua cost more than the rest of the script.
var startCmd = redis.NewScript(LuaTerminal + `
local st = redis.call('HGET', KEYS[1], 'status')
if not st then return {-1, 0} end
if terminal(st) then return {0, 0} end
local n = redis.call('HINCRBY', KEYS[1], 'attempts', 1)
redis.call('HSET', KEYS[1], 'status', 'running', 'started_at', ARGV[1])
local code = 2
if st == 'queued' then code = 1 end
return {code, n}
`)

// requeueCmd hands a running job back to the queue when its attempt failed
// and asynq will try again, so the row says queued while it waits.
//
// KEYS[1] -> job hash
// ARGV[1] -> the run handing it back, "<generation>:<attempt>": only while
// it is the row's latest (see settleCmd's ARGV[13]); "" for any
//
// Returns 1 if the job moved running → queued, 0 otherwise.
var requeueCmd = redis.NewScript(LuaRun + `
local row = redis.call('HMGET', KEYS[1], 'status', 'generation', 'attempts')
if row[1] ~= 'running' then return 0 end
if not latestRun(ARGV[1], row[2], row[3]) then return 0 end
redis.call('HSET', KEYS[1], 'status', 'queued')
return 1
`)

// settleCmd ends a job: status, result or error, completion time, and its
// entry in the session's pending set (unless it was already delivered, for
// example to a caller that waited for it, in which case retention starts).
// In the same step it records what must follow in the session's outbox, so
// a crash between two Redis calls loses no resume and no join (outbox.go
// names each entry kind, who records it and who carries it out):
//
//	r|<job id>    announce this job (a plain job, or a member settling after its batch joined)
//	j|<batch id>  the batch joined: this settle brought settled == size and won the claim
//	s|<batch id>  the batch's first member settled: arm its straggler timer
//	i|<job id>    a turn's report, to be appended to the reports stream
//	w|<job id>    like r|, but a caller is waiting for this job (wait_ms) until
//	              the row's wait_until: the waiter takes the result and the
//	              entry is dropped, or it lets go and the entry becomes r|
//
// A batch member counts once, here, because only the call that moves it to a
// terminal state gets this far.
//
// KEYS[1] -> job hash
// KEYS[2] -> session pending zset
// KEYS[3] -> session outbox zset
// ARGV[1] -> terminal status (completed | failed | cancelled)
// ARGV[2] -> "1" if a result is set
// ARGV[3] -> result
// ARGV[4] -> "1" if an error is set
// ARGV[5] -> error
// ARGV[6] -> now (ms)
// ARGV[7] -> retention (s), applied when the job was already notified
// ARGV[8] -> session key prefix, "<ns>:{<tag>}:", for the batch's keys
// ARGV[9] -> "1" if this job may be announced on its own (the wake policy
//
//	says its session may be woken); "0" records no r| entry
//
// ARGV[10] -> "1" to record i| (a report to index: the caller decided)
// ARGV[11] -> "1" if the drain must hold this report until it is indexed
//
//	(row field hold_index)
//
// ARGV[12] -> "1" to start the row's retention now, notified or not (a
// worker's own session: no one drains it); the pending zset expires with it
// ARGV[13] -> the run this outcome is of, "<generation>:<attempt>", or ""
// for whatever is current: a run that outlived its task settles nothing
// once the job was retried (bgjobs.Outcome.Run)
//
// Returns {1, entries...} if this call settled the job (the outbox members
// it recorded), {0} if it was already terminal or the run is not the
// latest (a no-op), {-1} if there is no such row.
var settleCmd = redis.NewScript(LuaTerminal + LuaRun + `
local row = redis.call('HMGET', KEYS[1], 'status', 'id', 'notified', 'batch_id', 'wait_until', 'generation', 'attempts')
local st, id = row[1], row[2]
if not st then return {-1} end
if terminal(st) then return {0} end
if not latestRun(ARGV[13], row[6], row[7]) then return {0} end
local set = {'status', ARGV[1], 'has_result', ARGV[2], 'result', ARGV[3],
  'has_error', ARGV[4], 'error', ARGV[5], 'completed_at', ARGV[6]}
if ARGV[11] == '1' then set[#set + 1] = 'hold_index'; set[#set + 1] = '1' end
redis.call('HSET', KEYS[1], unpack(set))
if row[3] == '1' then
  redis.call('EXPIRE', KEYS[1], ARGV[7])
else
  redis.call('ZADD', KEYS[2], ARGV[6], id)
end
if ARGV[12] == '1' then
  redis.call('EXPIRE', KEYS[1], ARGV[7])
  redis.call('EXPIRE', KEYS[2], ARGV[7])
end
local out = {1}
local function record(entry)
  redis.call('ZADD', KEYS[3], ARGV[6], entry)
  out[#out + 1] = entry
end
local announce = 'r|'
if row[5] and tonumber(row[5]) > tonumber(ARGV[6]) then announce = 'w|' end
if ARGV[10] == '1' then record('i|' .. id) end
local bid = row[4]
if not bid or bid == '' then
  if ARGV[9] == '1' then record(announce .. id) end
  return out
end
local bkey = ARGV[8] .. 'batch:' .. bid
local settled = redis.call('HINCRBY', bkey, 'settled', 1)
redis.call('HINCRBY', bkey, ARGV[1], 1)
local b = redis.call('HMGET', bkey, 'size', 'unsealed')
if redis.call('EXISTS', bkey .. ':claim') == 1 then
  if ARGV[9] == '1' then record('r|' .. id) end
elseif settled >= tonumber(b[1]) and b[2] ~= '1' then
  if redis.call('SET', bkey .. ':claim', 'full', 'NX') then
    redis.call('HSET', bkey, 'joined_at', ARGV[6], 'partial', '0')
    record('j|' .. bid)
  end
elseif settled == 1 then
  record('s|' .. bid)
end
return out
`)

// joinTurnCmd adds a job to the open batch of its session's turn, opening
// one if there is none: a turn batch grows with each spawn of the turn and
// stays unsealed (settleCmd does not join it) until sealTurnCmd seals it.
// Its member's row is written after, with the batch id this returns.
//
// KEYS[1] -> the turn's pointer to its open batch
// KEYS[2] -> the session's set of open turn batches
// ARGV[1] -> a new batch id, used if the turn has no open batch
// ARGV[2] -> job id
// ARGV[3] -> "1" if the job is not incognito (may wake the session)
// ARGV[4] -> now (ms)
// ARGV[5] -> session key prefix, "<ns>:{<tag>}:"
// ARGV[6] -> pointer TTL (s): an unsealed batch's pointer outlives its seal
//
// Returns the batch id.
var joinTurnCmd = redis.NewScript(`
local bid = redis.call('GET', KEYS[1])
local bkey
if not bid then
  bid = ARGV[1]
  bkey = ARGV[5] .. 'batch:' .. bid
  redis.call('SET', KEYS[1], bid, 'EX', ARGV[6])
  redis.call('SADD', KEYS[2], bid)
  redis.call('HSET', bkey, 'id', bid, 'size', 0, 'settled', 0, 'completed', 0, 'failed', 0, 'cancelled', 0,
    'created_at', ARGV[4], 'open', 0, 'unsealed', '1', 'turn_ptr', KEYS[1])
end
bkey = ARGV[5] .. 'batch:' .. bid
redis.call('HINCRBY', bkey, 'size', 1)
if ARGV[3] == '1' then redis.call('HINCRBY', bkey, 'open', 1) end
redis.call('HSET', bkey, 'last_spawn', ARGV[4])
redis.call('RPUSH', bkey .. ':jobs', ARGV[2])
return bid
`)

// sealTurnCmd seals a turn batch: no spawn joins it any more, and if
// every member has settled it joins now (the same claim as a full join).
// On the window's timer it seals only once the window after the last
// spawn has passed; the session going idle seals at once.
//
// KEYS[1] -> batch hash
// KEYS[2] -> batch claim
// KEYS[3] -> session outbox zset
// KEYS[4] -> the session's set of open turn batches
// ARGV[1] -> batch id
// ARGV[2] -> now (ms)
// ARGV[3] -> window (ms); "0" seals now
//
// Returns {0} if it was sealed already, {1} if sealed, {2} if sealed and
// joined (j|<batch id> recorded), {-1, last spawn ms} if the window has
// not passed since the last spawn.
var sealTurnCmd = redis.NewScript(`
if redis.call('HGET', KEYS[1], 'unsealed') ~= '1' then return {0} end
local last = tonumber(redis.call('HGET', KEYS[1], 'last_spawn') or '0')
if tonumber(ARGV[3]) > 0 and tonumber(ARGV[2]) < last + tonumber(ARGV[3]) then return {-1, last} end
redis.call('HDEL', KEYS[1], 'unsealed')
local ptr = redis.call('HGET', KEYS[1], 'turn_ptr')
if ptr and redis.call('GET', ptr) == ARGV[1] then redis.call('DEL', ptr) end
redis.call('SREM', KEYS[4], ARGV[1])
local f = redis.call('HMGET', KEYS[1], 'settled', 'size')
if tonumber(f[1]) >= tonumber(f[2]) and redis.call('SET', KEYS[2], 'full', 'NX') then
  redis.call('HSET', KEYS[1], 'joined_at', ARGV[2], 'partial', '0')
  redis.call('ZADD', KEYS[3], ARGV[2], 'j|' .. ARGV[1])
  return {2}
end
return {1}
`)

// forceJoinCmd is the straggler timer firing: the same claim as a full join,
// taken early, so exactly one of the two ever joins the batch.
//
// KEYS[1] -> batch hash
// KEYS[2] -> batch claim
// KEYS[3] -> session outbox zset
// ARGV[1] -> batch id
// ARGV[2] -> now (ms)
//
// Returns 1 if this call joined the batch (partially), 0 if it had joined
// or is gone. The outbox entry it records is j|<batch id>.
var forceJoinCmd = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if not redis.call('SET', KEYS[2], 'partial', 'NX') then return 0 end
redis.call('HSET', KEYS[1], 'joined_at', ARGV[2], 'partial', '1')
redis.call('ZADD', KEYS[3], ARGV[2], 'j|' .. ARGV[1])
return 1
`)

// deleteCmd removes an ended job from its session.
//
// KEYS[1] -> job hash
// KEYS[2] -> session pending zset
// KEYS[3] -> session jobs zset
// ARGV[1] -> job id
//
// Returns 1 if deleted, -1 if there is no such row, -2 if it has not ended.
var deleteCmd = redis.NewScript(LuaTerminal + `
local st = redis.call('HGET', KEYS[1], 'status')
if not st then return -1 end
if not terminal(st) then return -2 end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
return 1
`)

// retryCmd re-arms an ended job for a new attempt: the row goes back to
// queued with its outcome cleared and its notification re-armed (so the new
// outcome drains once), its retention lifted, and, for a batch member, the
// batch's counters take the old outcome back so the new one counts once.
//
// KEYS[1] -> job hash
// KEYS[2] -> session pending zset
// ARGV[1] -> "1" to allow retrying a completed job
// ARGV[2] -> session key prefix, for the batch's keys
//
// Returns 1 if re-armed, -1 if there is no such row, -2 if it has not
// ended, -3 if it completed and ARGV[1] is not "1".
var retryCmd = redis.NewScript(LuaTerminal + `
local st = redis.call('HGET', KEYS[1], 'status')
if not st then return -1 end
if not terminal(st) then return -2 end
if st == 'completed' and ARGV[1] ~= '1' then return -3 end
local id = redis.call('HGET', KEYS[1], 'id')
redis.call('HSET', KEYS[1], 'status', 'queued', 'notified', '0', 'has_result', '0', 'result', '',
  'has_error', '0', 'error', '', 'report_indexed', '0')
redis.call('HDEL', KEYS[1], 'completed_at', 'started_at', 'notified_at', 'hold_index')
redis.call('HINCRBY', KEYS[1], 'generation', 1)
redis.call('PERSIST', KEYS[1])
redis.call('ZREM', KEYS[2], id)
local bid = redis.call('HGET', KEYS[1], 'batch_id')
if bid and bid ~= '' then
  local bkey = ARGV[2] .. 'batch:' .. bid
  redis.call('HINCRBY', bkey, 'settled', -1)
  redis.call('HINCRBY', bkey, st, -1)
end
return 1
`)

// hsetIfExistsCmd sets fields of rows only while each row exists: a late
// follow-up (an index mark, a progress line, a resume's delivery state)
// must never bring a deleted or expired row back as a fragment. One call
// takes the rows of one session (one hash tag), up to hsetIfExistsMax.
//
// KEYS[1], KEYS[2], … -> job hashes of one session
// ARGV[1], ARGV[2], … -> field, value, field, value …
//
// Returns how many rows were set.
var hsetIfExistsCmd = redis.NewScript(`
local n = 0
for _, key in ipairs(KEYS) do
  if redis.call('EXISTS', key) == 1 then
    redis.call('HSET', key, unpack(ARGV))
    n = n + 1
  end
end
return n
`)

// hsetIfExistsMax bounds the rows of one hsetIfExistsCmd call, so a
// 1,000-member batch's resume state is a few short scripts, not one long.
const hsetIfExistsMax = 250

// leaseCmd takes, keeps or releases a named lease: free, or already this
// holder's, it is (re)set for ARGV[2] ms, or released when ARGV[2] is 0.
//
// KEYS[1] -> lease key
// ARGV[1] -> holder token
// ARGV[2] -> lease length (ms); 0 releases it
//
// Returns 1 if the caller held or holds the lease, 0 if another does.
var leaseCmd = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if cur and cur ~= ARGV[1] then return 0 end
if ARGV[2] == '0' then
  redis.call('DEL', KEYS[1])
else
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
end
return 1
`)

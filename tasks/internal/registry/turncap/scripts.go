package turncap

import "github.com/redis/go-redis/v9"

// acquireTurnCmd takes a slot of the global turn cap, or renews it. A
// member is "<agent>/<job id>", so the script can count an agent's slots
// (the zset holds at most the cap's few members) and hold it to its share.
//
// KEYS[1] -> turn semaphore zset (member = agent/job id, score = lease expiry ms)
// ARGV[1] -> member
// ARGV[2] -> now (ms); leases that expired before it are dropped first
// ARGV[3] -> new lease expiry (ms)
// ARGV[4] -> cap
// ARGV[5] -> the agent's share of the cap
// ARGV[6] -> the agent's member prefix ("<agent>/")
//
// Returns 1 if the job holds a slot, 0 if the cap is reached, 2 if the
// agent holds its share.
var acquireTurnCmd = redis.NewScript(`
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[2])
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
  return 1
end
local held = redis.call('ZRANGE', KEYS[1], 0, -1)
if #held >= tonumber(ARGV[4]) then return 0 end
local mine, p = 0, ARGV[6]
for _, m in ipairs(held) do
  if string.sub(m, 1, #p) == p then mine = mine + 1 end
end
if mine >= tonumber(ARGV[5]) then return 2 end
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
return 1
`)

// renewTurnCmd extends a held slot of the global turn cap; a slot that
// lapsed meanwhile is not taken back.
//
// KEYS[1] -> turn semaphore zset
// ARGV[1] -> member (agent/job id)
// ARGV[2] -> new lease expiry (ms)
//
// Returns 1 if renewed, 0 if the slot had lapsed.
var renewTurnCmd = redis.NewScript(`
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
return 1
`)

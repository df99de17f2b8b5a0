package tasks

import (
	"crypto/sha256"
	"encoding/hex"
)

// keys builds every Redis key bgjobs owns. Session-scoped keys carry the hash
// tag {agent/session} so one script touches one Redis Cluster slot; the
// namespace prefix lets deployments and tests share a database.
//
//	<ns>:{<agent>/<session>}:job:<id>     hash   the job row
//	<ns>:{<agent>/<session>}:pending      zset   ended, not yet notified (score = completed_at ms)
//	<ns>:{<agent>/<session>}:jobs         zset   every job of the session (score = created_at ms)
//	<ns>:{<agent>/<session>}:drain:<h>    string ids a drain with Idempotency-Key h returned (10 min)
//	<ns>:{<agent>/<session>}:outbox       zset   follow-ups a settle recorded, pumped to asynq (score = ms)
//	<ns>:{<agent>/<session>}:busy         string the busy lease: its expiry in ms (key TTL a little longer)
//	<ns>:{<agent>/<session>}:held         zset   resume triggers held while busy (score = ms)
//	<ns>:{<agent>/<session>}:batch:<b>    hash   size, settled, completed, failed, cancelled, joined_at, partial
//	<ns>:{<agent>/<session>}:batch:<b>:claim  string (SET NX) the single-fire join claim
//	<ns>:{<agent>/<session>}:batch:<b>:jobs   list  member job ids, in spec order
//	<ns>:batchidx                         hash   batch id → tag
//	<ns>:reports                          stream every indexable document (the search feed; never trimmed)
//	<ns>:indexer                          string set while a search writer runs (TTL)
//	<ns>:apikeys                          hash   SHA-256 of an agent key (hex) → agent
//	<ns>:{<agent>/<session>}:stormwin     string the resume storm guard's open window (PX)
//	<ns>:{<agent>/<session>}:stormq       zset   singleton resumes merging behind the window
//	<ns>:{<agent>/<session>}:inflight     string a resume of this session is being delivered (PX)
//	<ns>:{<agent>/<session>}:sent:<m>     string resume message m was delivered (24 h)
//	<ns>:jobidx                           hash   job id → tag (lookup by id)
//	<ns>:jobidx:cursor                    string where the reconciler's HSCAN of jobidx resumes
//	<ns>:active                           zset   job ids not yet terminal, for the reconciler (score = created_at ms)
//	<ns>:turnsem                          zset   running turns → lease expiry ms (the global cap)
//	<ns>:agents                           set    registered agent names
//	<ns>:agent:<agent>                    string the agent's JSON configuration
//	<ns>:agent:<agent>:jobs               zset   every job of the agent (score = created_at ms)
//	<ns>:agent:<agent>:idem:<h>           string job id spawned with Idempotency-Key h (24 h)
//	<ns>:events:<agent>                   pub/sub channel of the agent's events
//	<ns>:events:<agent>:stream            stream capped log of the same events
type keys struct{ ns string }

func (k keys) session(tag string) string          { return k.ns + ":{" + tag + "}" }
func (k keys) job(tag, id string) string          { return k.jobPrefix(tag) + id }
func (k keys) jobPrefix(tag string) string        { return k.session(tag) + ":job:" }
func (k keys) pending(tag string) string          { return k.session(tag) + ":pending" }
func (k keys) sessionJobs(tag string) string      { return k.session(tag) + ":jobs" }
func (k keys) drainIdem(tag, key string) string   { return k.session(tag) + ":drain:" + digest(key) }
func (k keys) jobIndex() string                   { return k.ns + ":jobidx" }
func (k keys) jobIndexCursor() string             { return k.jobIndex() + ":cursor" }
func (k keys) sessionPrefix(tag string) string    { return k.session(tag) + ":" }
func (k keys) outbox(tag string) string           { return k.session(tag) + ":outbox" }
func (k keys) outboxPattern() string              { return k.ns + ":{*}:outbox" }
func (k keys) busy(tag string) string             { return k.session(tag) + ":busy" }
func (k keys) held(tag string) string             { return k.session(tag) + ":held" }
func (k keys) batch(tag, id string) string        { return k.session(tag) + ":batch:" + id }
func (k keys) batchClaim(tag, id string) string   { return k.batch(tag, id) + ":claim" }
func (k keys) batchJobs(tag, id string) string    { return k.batch(tag, id) + ":jobs" }
func (k keys) batchIndex() string                 { return k.ns + ":batchidx" }
func (k keys) reports() string                    { return k.ns + ":reports" }
func (k keys) indexerAlive() string               { return k.ns + ":indexer" }
func (k keys) apiKeys() string                    { return k.ns + ":apikeys" }
func (k keys) stormWindow(tag string) string      { return k.session(tag) + ":stormwin" }
func (k keys) stormQueue(tag string) string       { return k.session(tag) + ":stormq" }
func (k keys) stormPattern() string               { return k.ns + ":{*}:stormq" }
func (k keys) inflight(tag string) string         { return k.session(tag) + ":inflight" }
func (k keys) sent(tag, messageID string) string  { return k.session(tag) + ":sent:" + messageID }
func (k keys) active() string                     { return k.ns + ":active" }
func (k keys) turnSem() string                    { return k.ns + ":turnsem" }
func (k keys) agents() string                     { return k.ns + ":agents" }
func (k keys) agent(agent string) string          { return k.ns + ":agent:" + agent }
func (k keys) agentJobs(agent string) string      { return k.agent(agent) + ":jobs" }
func (k keys) spawnIdem(agent, key string) string { return k.agent(agent) + ":idem:" + digest(key) }
func (k keys) events(agent string) string         { return k.ns + ":events:" + agent }
func (k keys) eventStream(agent string) string    { return k.events(agent) + ":stream" }

// digest keeps client-chosen strings (idempotency keys) out of key names.
func digest(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:12])
}

package registry

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// Keys builds every Redis key bgjobs owns, and parses the few it must read
// back (a sweep finding sessions by pattern). Session-scoped keys carry the
// hash tag {agent/session} so one script touches one Redis Cluster slot; the
// namespace prefix lets deployments and tests share a database.
//
//	<ns>:{<agent>/<session>}:job:<id>     hash   the job row
//	<ns>:{<agent>/<session>}:pending      zset   ended, not yet notified (score = completed_at ms)
//	<ns>:{<agent>/<session>}:jobs         zset   every job of the session (score = created_at ms)
//	<ns>:{<agent>/<session>}:drain:<h>    string ids a drain with Idempotency-Key h returned (10 min)
//	<ns>:{<agent>/<session>}:took:<n>     string ids a drain, ack or wait with hand-over nonce n took (10 min)
//	<ns>:{<agent>/<session>}:void:<n>     string nonce n's caller gave up: its calls flip nothing (10 min)
//	<ns>:{<agent>/<session>}:outbox       zset   follow-ups a settle recorded, pumped to asynq (score = ms)
//	<ns>:{<agent>/<session>}:busy         string the busy lease: its expiry in ms (key TTL a little longer)
//	<ns>:{<agent>/<session>}:held         zset   resume triggers held while busy (score = ms)
//	<ns>:{<agent>/<session>}:batch:<b>    hash   size, settled, completed, failed, cancelled, joined_at, partial
//	<ns>:{<agent>/<session>}:batch:<b>:claim  string (SET NX) the single-fire join claim
//	<ns>:{<agent>/<session>}:batch:<b>:jobs   list  member job ids, in spec order
//	<ns>:{<agent>/<session>}:turn:<h>     string the open turn batch of turn_id h (until sealed)
//	<ns>:{<agent>/<session>}:turns        set    the session's open (unsealed) turn batches
//	<ns>:{<agent>/<session>}:stormwin     string the resume storm guard's open window (PX)
//	<ns>:{<agent>/<session>}:stormq       zset   singleton resumes merging behind the window
//	<ns>:{<agent>/<session>}:inflight     string a resume of this session is being delivered (PX)
//	<ns>:{<agent>/<session>}:sent:<m>     string resume message m was delivered (24 h)
//	<ns>:batchidx                         hash   batch id → tag
//	<ns>:stragglers                       zset   "<batch id>|<tag>" of batches waiting to join → straggler due ms
//	<ns>:jobidx                           hash   job id → tag (lookup by id)
//	<ns>:jobidx:cursor                    string where the index sweep's HSCAN of jobidx resumes
//	<ns>:active                           zset   job ids not yet terminal, for the reconciler (score = created_at ms; run_at for a job that starts later)
//	<ns>:turnsem                          zset   running turns, "<agent>/<job id>" → lease expiry ms (the global cap)
//	<ns>:reports                          stream every indexable document (the search feed; never trimmed)
//	<ns>:indexer                          string set while a search writer runs (TTL)
//	<ns>:apikeys                          hash   SHA-256 of an agent key (hex) → agent
//	<ns>:console:<digest>                 hash   a console sign-in, by its token's SHA-256 (hex): agent, admin ("1" or ""), key (the SHA-256 of the key it was made with); expires with its cookie
//	<ns>:lease:<name>                     string the holder of a maintenance lease (PX)
//	<ns>:agents                           set    registered agent names
//	<ns>:spawners                         set    agents that have spawned a job (registered or not)
//	<ns>:agent:<agent>                    string the agent's JSON configuration
//	<ns>:agent:<agent>:jobs               zset   every job of the agent (score = created_at ms)
//	<ns>:agent:<agent>:idem:<h>           string job id spawned with Idempotency-Key h (24 h)
//	<ns>:events:{<ns>}:<agent>:stream     stream capped log of the agent's events (one hash tag for
//	                                             all, so one XREAD reads them all on a cluster too)
type Keys struct{ NS string }

func (k Keys) session(tag string) string         { return k.NS + ":{" + tag + "}" }
func (k Keys) Job(tag, id string) string         { return k.JobPrefix(tag) + id }
func (k Keys) JobPrefix(tag string) string       { return k.session(tag) + ":job:" }
func (k Keys) Pending(tag string) string         { return k.session(tag) + ":pending" }
func (k Keys) SessionJobs(tag string) string     { return k.session(tag) + ":jobs" }
func (k Keys) DrainIdem(tag, key string) string  { return k.session(tag) + ":drain:" + Digest(key) }
func (k Keys) Took(tag, nonce string) string     { return k.session(tag) + ":took:" + nonce }
func (k Keys) Void(tag, nonce string) string     { return k.session(tag) + ":void:" + nonce }
func (k Keys) JobIndex() string                  { return k.NS + ":jobidx" }
func (k Keys) jobIndexCursor() string            { return k.JobIndex() + ":cursor" }
func (k Keys) sessionPrefix(tag string) string   { return k.session(tag) + ":" }
func (k Keys) Outbox(tag string) string          { return k.session(tag) + ":outbox" }
func (k Keys) Busy(tag string) string            { return k.session(tag) + ":busy" }
func (k Keys) Held(tag string) string            { return k.session(tag) + ":held" }
func (k Keys) batch(tag, id string) string       { return k.session(tag) + ":batch:" + id }
func (k Keys) batchClaim(tag, id string) string  { return k.batch(tag, id) + ":claim" }
func (k Keys) batchJobs(tag, id string) string   { return k.batch(tag, id) + ":jobs" }
func (k Keys) batchIndex() string                { return k.NS + ":batchidx" }
func (k Keys) Stragglers() string                { return k.NS + ":stragglers" }
func (k Keys) turnBatch(tag, turn string) string { return k.session(tag) + ":turn:" + Digest(turn) }
func (k Keys) openTurns(tag string) string       { return k.session(tag) + ":turns" }
func (k Keys) Reports() string                   { return k.NS + ":reports" }
func (k Keys) IndexerAlive() string              { return k.NS + ":indexer" }
func (k Keys) APIKeys() string                   { return k.NS + ":apikeys" }

// ConsoleSignIn is a console sign-in's hash, by its token's digest.
func (k Keys) ConsoleSignIn(tokenDigest string) string { return k.NS + ":console:" + tokenDigest }
func (k Keys) lease(name string) string                { return k.NS + ":lease:" + name }
func (k Keys) StormWindow(tag string) string           { return k.session(tag) + ":stormwin" }
func (k Keys) StormQueue(tag string) string            { return k.session(tag) + ":stormq" }
func (k Keys) Inflight(tag string) string              { return k.session(tag) + ":inflight" }
func (k Keys) Sent(tag, messageID string) string       { return k.session(tag) + ":sent:" + messageID }
func (k Keys) active() string                          { return k.NS + ":active" }
func (k Keys) TurnSem() string                         { return k.NS + ":turnsem" }
func (k Keys) Agents() string                          { return k.NS + ":agents" }
func (k Keys) Spawners() string                        { return k.NS + ":spawners" }
func (k Keys) Agent(agent string) string               { return k.NS + ":agent:" + agent }
func (k Keys) AgentJobs(agent string) string           { return k.Agent(agent) + ":jobs" }
func (k Keys) SpawnIdem(agent, key string) string      { return k.Agent(agent) + ":idem:" + Digest(key) }
func (k Keys) EventStream(agent string) string         { return k.eventsPrefix() + agent + ":stream" }
func (k Keys) eventsPrefix() string                    { return k.NS + ":events:{" + k.NS + "}:" }

// Patterns and their parsers, for the sweeps that find sessions by key.
func (k Keys) outboxPattern() string      { return k.NS + ":{*}:outbox" }
func (k Keys) stormPattern() string       { return k.NS + ":{*}:stormq" }
func (k Keys) agentJobsPattern() string   { return k.NS + ":agent:*:jobs" }
func (k Keys) EventStreamPattern() string { return k.eventsPrefix() + "*:stream" }

// tagOfSessionKey returns the tag of a session-scoped key ending in suffix.
func (k Keys) tagOfSessionKey(key, suffix string) string {
	return strings.TrimSuffix(strings.TrimPrefix(key, k.NS+":{"), "}:"+suffix)
}

// AgentOfEventStream is EventStream's inverse.
func (k Keys) AgentOfEventStream(key string) string {
	return strings.TrimSuffix(strings.TrimPrefix(key, k.eventsPrefix()), ":stream")
}

// agentOfKey returns the agent of <ns>:<mid><agent><suffix>.
func (k Keys) agentOfKey(key, mid, suffix string) string {
	return strings.TrimSuffix(strings.TrimPrefix(key, k.NS+":"+mid), suffix)
}

// Digest keeps client-chosen strings (idempotency keys) out of key names.
func Digest(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:12])
}

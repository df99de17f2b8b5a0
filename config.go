package bgjobs

import (
	"cmp"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"
)

// Defaults for Config. Exported so embedders and docs name the same values.
const (
	AddrDefault             = "127.0.0.1:8080"
	DataDirDefault          = "./data"
	TurnConcurrencyDefault  = 3
	WorkConcurrencyDefault  = 10
	BatchJoinTimeoutDefault = 900 * time.Second
	SummaryCharsDefault     = 2000
	RunTimeoutDefault       = 30 * time.Minute
	ResumeCoalesceDefault   = 250 * time.Millisecond
	// ResumeCoalesceMaxDefault caps a storm window in a sustained burst.
	ResumeCoalesceMaxDefault = time.Minute
	RetentionDefault         = 7 * 24 * time.Hour
	ReconcileIntervalDefault = 30 * time.Second
	ShutdownTimeoutDefault   = 10 * time.Second
	NamespaceDefault         = "bgjobs"
	PollIntervalDefault      = 10 * time.Millisecond
	// Tuning of the asynq fetch loops (see Config).
	TurnPollIntervalDefault    = 50 * time.Millisecond
	ResumePollIntervalDefault  = 10 * time.Millisecond
	ControlPollIntervalDefault = 100 * time.Millisecond
	SparePollIntervalDefault   = 100 * time.Millisecond
	FetchWaitDefault           = 10 * time.Second
	MaxFetchLoopsDefault       = 12
	// Resume delivery: asynq's retries, then slow re-sends.
	ResumeRetriesDefault       = 10
	ResumeAgainIntervalDefault = 30 * time.Minute
	ResumeAgainMaxDefault      = 48
	// Event streams (SSE) a process serves.
	EventStreamsPerAgentDefault = 16
	EventStreamsDefault         = 1024
	MaxFastFetchLoopsDefault    = 3
	// MaxDepthDefault bounds how deep a worker's own spawns may nest.
	MaxDepthDefault = 3
	// MinReplicasTimeoutDefault bounds the wait for replicas (MinReplicas).
	MinReplicasTimeoutDefault = time.Second
	// TurnWindowDefault seals a turn's batch this long after its last spawn.
	TurnWindowDefault = 2 * time.Second
)

// Config is everything a bgjobs process reads at start. Load reads it from
// the environment; flags override single fields afterwards.
type Config struct {
	// Addr is the HTTP listen address. Defaults to AddrDefault.
	Addr string
	// RedisURL selects the Redis server (redis://, rediss://,
	// redis-sentinel://). Empty means an embedded, in-memory miniredis.
	RedisURL string
	// DataDir is where the search index lives. Defaults to DataDirDefault.
	DataDir string
	// LogLevel (BGJOBS_LOG_LEVEL: debug, info, warn or error) is the least
	// severe line a process writes. The zero value is info: a line per
	// request and per job event, which at thousands of jobs a second costs
	// a few percent of throughput; warn keeps what needs attention.
	LogLevel slog.Level
	// APIKeys maps an agent key to its agent name.
	APIKeys map[string]string
	// AdminKey may act for any agent and manage agents. Empty: no admin.
	AdminKey string
	// MetricsKey (BGJOBS_METRICS_KEY), when set, is the bearer key
	// /metrics asks of a scraper (the admin key is taken too). Empty:
	// /metrics is open, as Prometheus scrapes by default.
	MetricsKey string
	// TurnConcurrency caps turn jobs running at once across all processes.
	// Defaults to TurnConcurrencyDefault.
	TurnConcurrency int
	// TurnShare (BGJOBS_TURN_SHARE) is the most slots of TurnConcurrency
	// one agent's turns hold at once while the namespace has other agents,
	// so a tenant whose agent never answers cannot starve the rest; its
	// turns past the share wait queued. A lone agent uses the whole cap.
	// Defaults to half the cap, rounded up; set it to the cap to turn the
	// share off.
	TurnShare int
	// WorkConcurrency is how many work jobs one process runs at once.
	// Defaults to WorkConcurrencyDefault.
	WorkConcurrency int
	// WorkShare (BGJOBS_WORK_SHARE) is the most of a process's
	// WorkConcurrency slots one agent's work jobs hold at once while the
	// namespace has other agents, so one tenant's long work (a delegate
	// to an agent that never answers) cannot hold every slot; its jobs
	// past the share wait queued. A lone agent uses every slot. Defaults
	// to half the slots, rounded up; set it to WorkConcurrency to turn the
	// share off.
	WorkShare int
	// NoAutoResume turns push-resume off for every agent
	// (BGJOBS_AUTO_RESUME=false). The zero value resumes.
	NoAutoResume bool
	// BatchJoinTimeout is the straggler timeout of a batch join. Defaults to
	// BatchJoinTimeoutDefault.
	BatchJoinTimeout time.Duration
	// SummaryChars caps a turn report inside a notification. Defaults to
	// SummaryCharsDefault.
	SummaryChars int
	// MinReplicas (BGJOBS_MIN_REPLICAS): when above 0, a write bgjobs waits
	// for (a spawn, a settle, a drain's flip, an ack) counts as done only
	// once that many replicas confirm it (Redis WAIT); past
	// MinReplicasTimeout (BGJOBS_MIN_REPLICAS_TIMEOUT) the caller gets 503
	// and may repeat with its idempotency key. 0: Redis' asynchronous
	// replication, which a failover may cut short by its last second.
	MinReplicas        int
	MinReplicasTimeout time.Duration
	// TurnWindow (BGJOBS_TURN_WINDOW) seals the batch of a spawn's turn_id
	// this long after the turn's last spawn, unless the session goes idle
	// first. Defaults to TurnWindowDefault.
	TurnWindow time.Duration
	// MaxDepth bounds nesting (BGJOBS_MAX_DEPTH): a job spawned from a
	// worker's own turn (origin "background:<job id>") is one deeper than
	// that job; past MaxDepth a spawn is refused. Defaults to
	// MaxDepthDefault.
	MaxDepth int
	// RunTimeout is the longest any job, turn or work, may run
	// (BGJOBS_TURN_TIMEOUT). Defaults to RunTimeoutDefault.
	RunTimeout time.Duration
	// ResumeCoalesce is the storm-guard window for resumes; negative turns
	// the guard off (BGJOBS_RESUME_COALESCE=0). Defaults to
	// ResumeCoalesceDefault.
	ResumeCoalesce time.Duration
	// ResumeCoalesceMax (BGJOBS_RESUME_COALESCE_MAX) is the longest a storm
	// window grows to while completions keep coming: each window that
	// merged something doubles the next one's cap (8 × ResumeCoalesce at
	// first) up to this. Defaults to ResumeCoalesceMaxDefault.
	ResumeCoalesceMax time.Duration
	// Retention is how long a job row is kept after it was notified. Unread
	// rows never expire. Defaults to RetentionDefault.
	Retention time.Duration
	// ReconcileInterval is how often the reconciler sweeps. Defaults to
	// ReconcileIntervalDefault.
	ReconcileInterval time.Duration
	// ShutdownTimeout bounds a graceful stop: running jobs get this long to
	// finish before they are handed back to the queue. Defaults to
	// ShutdownTimeoutDefault.
	ShutdownTimeout time.Duration
	// Namespace prefixes every Redis key bgjobs owns, so several
	// deployments (or tests) can share one Redis database. Defaults to
	// NamespaceDefault.
	Namespace string
	// FetchAllow lists hosts (host or host:port) the ingest fetcher may
	// reach even in loopback or private space (BGJOBS_FETCH_ALLOW, comma
	// separated). Empty: public addresses only.
	FetchAllow []string
	// AgentAllow lists hosts (host or host:port) agents' a2a_url and
	// webhook_url may point at even in loopback or private space
	// (BGJOBS_AGENT_ALLOW, comma separated). Empty: public addresses only.
	AgentAllow []string
	// StoredKeys is set at start when keys made with `bgjobs keys create`
	// are stored in Redis: the API then requires a key.
	StoredKeys bool
	// PollInterval is how often an idle work fetch loop looks for a task
	// (BGJOBS_POLL_INTERVAL); it bounds pickup latency on an idle system.
	// Defaults to PollIntervalDefault.
	PollInterval time.Duration
	// TurnPollInterval is how often an idle process looks for turns
	// (BGJOBS_TURN_POLL_INTERVAL): a turn runs for seconds, so a few tens of
	// milliseconds to start one are not worth a hundred polls a second.
	// Never below PollInterval. Defaults to TurnPollIntervalDefault.
	TurnPollInterval time.Duration
	// ResumePollInterval is how often an idle process looks for resumes
	// to deliver (BGJOBS_RESUME_POLL_INTERVAL). Defaults to
	// ResumePollIntervalDefault.
	ResumePollInterval time.Duration
	// ControlPollInterval is how often an idle process looks for due
	// timers (BGJOBS_CONTROL_POLL_INTERVAL); asynq moves due timers into
	// the queue once a second, so faster buys nothing. Never below
	// PollInterval. Defaults to ControlPollIntervalDefault.
	ControlPollInterval time.Duration
	// MaxFetchLoops caps the work fetch loops of a process
	// (BGJOBS_MAX_FETCH_LOOPS). An asynq server fetches one task per round
	// trip from a single loop, which caps a busy process below what its
	// workers could run, so work concurrency is split over one loop per 4
	// slots, up to this many. Defaults to MaxFetchLoopsDefault.
	MaxFetchLoops int
	// MaxFastFetchLoops caps the work fetch loops that poll an idle queue
	// at PollInterval (one per 16 slots, up to this many); the rest poll at
	// SparePollInterval (BGJOBS_MAX_FAST_FETCH_LOOPS). Defaults to
	// MaxFastFetchLoopsDefault.
	MaxFastFetchLoops int
	// ResumeRetries is how many times a failed resume delivery is retried
	// with backoff (1 s, 2 s, 4 s … up to 5 min; the default spans about
	// 14 minutes) (BGJOBS_RESUME_RETRIES). Defaults to ResumeRetriesDefault.
	ResumeRetries int
	// ResumeAgainInterval: once those retries are spent and a job it
	// announces is still undrained, the resume is sent again this often
	// (BGJOBS_RESUME_AGAIN_INTERVAL), at most ResumeAgainMax times
	// (BGJOBS_RESUME_AGAIN_MAX; the defaults keep trying for a day). Each
	// failure is logged, evented (background.resume_failed) and shown on
	// the job's row. Defaults to ResumeAgainIntervalDefault and
	// ResumeAgainMaxDefault.
	ResumeAgainInterval time.Duration
	ResumeAgainMax      int
	// EventStreamsPerAgent caps the event streams (GET /v1/events) one
	// agent (or the admin) holds open on a process at once
	// (BGJOBS_EVENT_STREAMS_PER_AGENT); past it the answer is 429.
	// Defaults to EventStreamsPerAgentDefault.
	EventStreamsPerAgent int
	// EventStreams caps the event streams a process serves in all
	// (BGJOBS_EVENT_STREAMS). They share one Redis read, whatever their
	// number. Defaults to EventStreamsDefault.
	EventStreams int
	// SparePollInterval is how often the spare work fetch loops poll an
	// idle queue (BGJOBS_SPARE_POLL_INTERVAL). Defaults to
	// SparePollIntervalDefault.
	SparePollInterval time.Duration
	// FetchWait is the longest a worker's fetch that found its queue empty
	// is held for a task to arrive (a wake-up releases it at once); a task
	// moved by a tool that announces nothing is picked up within it. A
	// negative value turns holding off: idle fetch loops poll. Defaults to
	// FetchWaitDefault.
	FetchWait time.Duration
}

// WithDefaults returns a copy of c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	c.Addr = cmp.Or(c.Addr, AddrDefault)
	c.DataDir = cmp.Or(c.DataDir, DataDirDefault)
	c.TurnConcurrency = cmp.Or(c.TurnConcurrency, TurnConcurrencyDefault)
	c.WorkConcurrency = cmp.Or(c.WorkConcurrency, WorkConcurrencyDefault)
	c.TurnShare = min(c.TurnConcurrency, cmp.Or(c.TurnShare, (c.TurnConcurrency+1)/2))
	c.WorkShare = min(c.WorkConcurrency, cmp.Or(c.WorkShare, (c.WorkConcurrency+1)/2))
	c.BatchJoinTimeout = cmp.Or(c.BatchJoinTimeout, BatchJoinTimeoutDefault)
	c.SummaryChars = cmp.Or(c.SummaryChars, SummaryCharsDefault)
	c.RunTimeout = cmp.Or(c.RunTimeout, RunTimeoutDefault)
	c.MaxDepth = cmp.Or(c.MaxDepth, MaxDepthDefault)
	c.TurnWindow = cmp.Or(c.TurnWindow, TurnWindowDefault)
	c.MinReplicasTimeout = cmp.Or(c.MinReplicasTimeout, MinReplicasTimeoutDefault)
	c.ResumeCoalesce = cmp.Or(c.ResumeCoalesce, ResumeCoalesceDefault)
	c.ResumeCoalesceMax = cmp.Or(c.ResumeCoalesceMax, ResumeCoalesceMaxDefault)
	c.Retention = cmp.Or(c.Retention, RetentionDefault)
	c.ReconcileInterval = cmp.Or(c.ReconcileInterval, ReconcileIntervalDefault)
	c.ShutdownTimeout = cmp.Or(c.ShutdownTimeout, ShutdownTimeoutDefault)
	c.Namespace = cmp.Or(c.Namespace, NamespaceDefault)
	c.PollInterval = cmp.Or(c.PollInterval, PollIntervalDefault)
	c.TurnPollInterval = max(c.PollInterval, cmp.Or(c.TurnPollInterval, TurnPollIntervalDefault))
	c.ResumePollInterval = cmp.Or(c.ResumePollInterval, ResumePollIntervalDefault)
	c.ControlPollInterval = max(c.PollInterval, cmp.Or(c.ControlPollInterval, ControlPollIntervalDefault))
	c.MaxFetchLoops = cmp.Or(c.MaxFetchLoops, MaxFetchLoopsDefault)
	c.EventStreamsPerAgent = cmp.Or(c.EventStreamsPerAgent, EventStreamsPerAgentDefault)
	c.ResumeRetries = cmp.Or(c.ResumeRetries, ResumeRetriesDefault)
	c.ResumeAgainInterval = cmp.Or(c.ResumeAgainInterval, ResumeAgainIntervalDefault)
	c.ResumeAgainMax = cmp.Or(c.ResumeAgainMax, ResumeAgainMaxDefault)
	c.EventStreams = cmp.Or(c.EventStreams, EventStreamsDefault)
	c.MaxFastFetchLoops = cmp.Or(c.MaxFastFetchLoops, MaxFastFetchLoopsDefault)
	c.SparePollInterval = max(c.PollInterval, cmp.Or(c.SparePollInterval, SparePollIntervalDefault))
	c.FetchWait = cmp.Or(c.FetchWait, FetchWaitDefault)
	return c
}

// Validate reports the first field that cannot work, by its variable name.
func (c Config) Validate() error {
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		return FieldError("BGJOBS_ADDR", "not host:port: %v", err)
	}
	if c.TurnConcurrency < 1 {
		return FieldError("BGJOBS_TURN_CONCURRENCY", "must be at least 1")
	}
	if c.TurnShare < 1 {
		return FieldError("BGJOBS_TURN_SHARE", "must be at least 1")
	}
	if c.WorkConcurrency < 1 {
		return FieldError("BGJOBS_WORK_CONCURRENCY", "must be at least 1")
	}
	if c.WorkShare < 1 {
		return FieldError("BGJOBS_WORK_SHARE", "must be at least 1")
	}
	if c.SummaryChars < 100 {
		return FieldError("BGJOBS_SUMMARY_CHARS", "must be at least 100")
	}
	if c.MaxFetchLoops < 1 || c.MaxFastFetchLoops < 1 {
		return FieldError("BGJOBS_MAX_FETCH_LOOPS", "fetch loops must be at least 1")
	}
	if c.MinReplicas < 0 {
		return FieldError("BGJOBS_MIN_REPLICAS", "must be 0 or more")
	}
	if c.MaxDepth < 1 {
		return FieldError("BGJOBS_MAX_DEPTH", "must be at least 1")
	}
	if c.Retention < 10*time.Minute {
		// A repeated drain re-reads notified rows for 10 minutes.
		return FieldError("BGJOBS_RETENTION", "must be at least 10m")
	}
	return nil
}

// CheckExposure refuses open mode (no key anywhere) on a non-loopback
// address. Run it once StoredKeys is known.
func (c Config) CheckExposure() error {
	if c.OpenMode() && !IsLoopbackAddr(c.Addr) {
		return FieldError("BGJOBS_ADDR", "refusing to listen on non-loopback %s without keys (BGJOBS_API_KEYS, BGJOBS_ADMIN_KEY or bgjobs keys create)", c.Addr)
	}
	return nil
}

// OpenMode reports whether no key is configured: every request then acts as
// agent "default", which is allowed on loopback only.
func (c Config) OpenMode() bool { return len(c.APIKeys) == 0 && c.AdminKey == "" && !c.StoredKeys }

// IsLoopbackAddr reports whether a listen address binds loopback only.
// An empty host binds every interface, so it is not loopback.
func IsLoopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Load reads the configuration from the environment through getenv, so tests
// pass their own map instead of mutating the process environment.
func Load(getenv func(string) string) (Config, error) {
	c := Config{
		Addr:       getenv("BGJOBS_ADDR"),
		RedisURL:   getenv("REDIS_URL"),
		DataDir:    getenv("BGJOBS_DATA_DIR"),
		AdminKey:   getenv("BGJOBS_ADMIN_KEY"),
		MetricsKey: getenv("BGJOBS_METRICS_KEY"),
		Namespace:  getenv("BGJOBS_NAMESPACE"),
	}
	c.FetchAllow = hostList(getenv("BGJOBS_FETCH_ALLOW"))
	c.AgentAllow = hostList(getenv("BGJOBS_AGENT_ALLOW"))
	keys, err := parseAPIKeys(getenv("BGJOBS_API_KEYS"))
	if err != nil {
		return c, err
	}
	c.APIKeys = keys
	ints := []struct {
		name string
		dst  *int
	}{
		{"BGJOBS_TURN_CONCURRENCY", &c.TurnConcurrency},
		{"BGJOBS_TURN_SHARE", &c.TurnShare},
		{"BGJOBS_WORK_SHARE", &c.WorkShare},
		{"BGJOBS_WORK_CONCURRENCY", &c.WorkConcurrency},
		{"BGJOBS_SUMMARY_CHARS", &c.SummaryChars},
		{"BGJOBS_MAX_FETCH_LOOPS", &c.MaxFetchLoops},
		{"BGJOBS_MAX_FAST_FETCH_LOOPS", &c.MaxFastFetchLoops},
		{"BGJOBS_EVENT_STREAMS_PER_AGENT", &c.EventStreamsPerAgent},
		{"BGJOBS_EVENT_STREAMS", &c.EventStreams},
		{"BGJOBS_RESUME_RETRIES", &c.ResumeRetries},
		{"BGJOBS_RESUME_AGAIN_MAX", &c.ResumeAgainMax},
		{"BGJOBS_MAX_DEPTH", &c.MaxDepth},
		{"BGJOBS_MIN_REPLICAS", &c.MinReplicas},
	}
	for _, v := range ints {
		if s := getenv(v.name); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil {
				return c, FieldError(v.name, "not an integer: %q", s)
			}
			*v.dst = n
		}
	}
	durations := []struct {
		name string
		dst  *time.Duration
	}{
		{"BGJOBS_BATCH_JOIN_TIMEOUT", &c.BatchJoinTimeout},
		{"BGJOBS_TURN_TIMEOUT", &c.RunTimeout},
		{"BGJOBS_RESUME_COALESCE", &c.ResumeCoalesce},
		{"BGJOBS_RESUME_COALESCE_MAX", &c.ResumeCoalesceMax},
		{"BGJOBS_RETENTION", &c.Retention},
		{"BGJOBS_RECONCILE_INTERVAL", &c.ReconcileInterval},
		{"BGJOBS_SHUTDOWN_TIMEOUT", &c.ShutdownTimeout},
		{"BGJOBS_POLL_INTERVAL", &c.PollInterval},
		{"BGJOBS_TURN_POLL_INTERVAL", &c.TurnPollInterval},
		{"BGJOBS_RESUME_POLL_INTERVAL", &c.ResumePollInterval},
		{"BGJOBS_CONTROL_POLL_INTERVAL", &c.ControlPollInterval},
		{"BGJOBS_SPARE_POLL_INTERVAL", &c.SparePollInterval},
		{"BGJOBS_RESUME_AGAIN_INTERVAL", &c.ResumeAgainInterval},
		{"BGJOBS_TURN_WINDOW", &c.TurnWindow},
		{"BGJOBS_MIN_REPLICAS_TIMEOUT", &c.MinReplicasTimeout},
	}
	for _, v := range durations {
		if s := getenv(v.name); s != "" {
			d, err := time.ParseDuration(s)
			if err != nil || d < 0 {
				return c, FieldError(v.name, "not a duration: %q", s)
			}
			*v.dst = d
		}
	}
	if s := getenv("BGJOBS_LOG_LEVEL"); s != "" {
		if err := c.LogLevel.UnmarshalText([]byte(s)); err != nil {
			return c, FieldError("BGJOBS_LOG_LEVEL", "not a level (debug, info, warn, error): %q", s)
		}
	}
	if s := getenv("BGJOBS_AUTO_RESUME"); s != "" {
		b, err := strconv.ParseBool(s)
		if err != nil {
			return c, FieldError("BGJOBS_AUTO_RESUME", "not a boolean: %q", s)
		}
		c.NoAutoResume = !b
	}
	if getenv("BGJOBS_RESUME_COALESCE") != "" && c.ResumeCoalesce == 0 {
		c.ResumeCoalesce = -1 // 0 turns the guard off; the zero value means the default
	}
	return c.WithDefaults(), nil
}

// hostList reads "host,host:port".
func hostList(s string) []string {
	var out []string
	for h := range strings.SplitSeq(s, ",") {
		if h = strings.TrimSpace(h); h != "" {
			out = append(out, h)
		}
	}
	return out
}

// parseAPIKeys reads "agent:key,agent:key".
func parseAPIKeys(s string) (map[string]string, error) {
	keys := map[string]string{}
	for pair := range strings.SplitSeq(s, ",") {
		pair = strings.TrimSpace(pair)
		if pair == "" {
			continue
		}
		agent, key, ok := strings.Cut(pair, ":")
		if !ok || key == "" || !ValidAgentName(agent) {
			return nil, FieldError("BGJOBS_API_KEYS", "want agent:key pairs separated by commas, got %q", pair)
		}
		if _, dup := keys[key]; dup {
			return nil, FieldError("BGJOBS_API_KEYS", "a key is given to two agents")
		}
		keys[key] = agent
	}
	return keys, nil
}

// String describes c without secrets, for the start-up log line.
func (c Config) String() string {
	redis := "embedded (in-memory, lost on exit)"
	if c.RedisURL != "" {
		redis = "external"
	}
	return fmt.Sprintf("addr=%s redis=%s namespace=%s agents_with_keys=%d admin=%t turn_concurrency=%d work_concurrency=%d log_level=%s",
		c.Addr, redis, c.Namespace, len(c.APIKeys), c.AdminKey != "", c.TurnConcurrency, c.WorkConcurrency, c.LogLevel)
}

package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/agents"
	"github.com/hibiken/asynq"
	asynqmetrics "github.com/hibiken/asynq/x/metrics"
	"github.com/hibiken/asynqmon"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/bgjobs/bgjobs/handlers"
	"github.com/bgjobs/bgjobs/internal/netguard"
	"github.com/bgjobs/bgjobs/internal/redisconn"
	"github.com/bgjobs/bgjobs/mcpapi"
	"github.com/bgjobs/bgjobs/metrics"
	"github.com/bgjobs/bgjobs/search"
	"github.com/bgjobs/bgjobs/tasks"
	"github.com/bgjobs/bgjobs/work"
)

// Mode selects what a process runs.
type Mode int

const (
	// ModeServe runs the HTTP API, the workers and the reconciler.
	ModeServe Mode = iota
	// ModeWorker runs the workers and the reconciler only, for scale-out.
	ModeWorker
)

// Options are the parts an embedding program may supply.
type Options struct {
	// Kinds is the work-kind registry; nil means the built-in kinds only.
	Kinds *work.Kinds
	// Logger defaults to JSON lines on stderr.
	Logger *slog.Logger
}

// Run runs a process until ctx ends, then stops gracefully: the listener
// closes, in-flight requests finish, running jobs get cfg.ShutdownTimeout to
// finish before they go back to their queue.
func Run(ctx context.Context, cfg bgjobs.Config, mode Mode, stdout io.Writer, opts Options) error {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	log := opts.Logger
	if log == nil {
		log = NewLogger(stdout, cfg.LogLevel)
	}
	if mode == ModeWorker && cfg.RedisURL == "" {
		return bgjobs.FieldError("REDIS_URL", "a worker joins a shared Redis; set REDIS_URL (only serve can run on the embedded one)")
	}
	conn, err := openRedis(ctx, cfg.RedisURL)
	if err != nil {
		return err
	}
	defer conn.close()
	if conn.embedded != nil {
		fmt.Fprintf(stdout, "bgjobs: no REDIS_URL: using an EMBEDDED in-memory Redis at %s; every job is LOST when this process exits\n", conn.embedded.m.Addr())
	}
	log.Info("starting", slog.String("mode", map[Mode]string{ModeServe: "serve", ModeWorker: "worker"}[mode]), slog.String("config", cfg.String()))

	kinds := opts.Kinds
	if kinds == nil {
		kinds = work.NewKinds()
	}
	runner := agents.NewA2A(netguard.NewAllow(cfg.AgentAllow))
	m := tasks.NewManager(conn.rdb, cfg, tasks.Deps{Kinds: kinds, Turns: runner, Resumer: runner, Logger: log})
	defer m.Close()
	fetchAllow := netguard.NewAllow(cfg.FetchAllow)
	kinds.Register(agents.IngestKind(netguard.Client(time.Minute, fetchAllow), fetchAllow, m.AppendDocs))
	kinds.Register(runner.DelegateKind(func(ctx context.Context, name string) (*bgjobs.Agent, error) {
		a, err := m.GetAgent(ctx, name)
		if bgjobs.ErrorCode(err) == bgjobs.ENotFound {
			return nil, nil
		}
		return a, err
	}))
	w := m.NewWorker()
	if err := w.Start(ctx); err != nil {
		return fmt.Errorf("start workers: %w", err)
	}
	defer w.Shutdown()

	if mode == ModeWorker {
		fmt.Fprintln(stdout, "bgjobs: worker running")
		<-ctx.Done()
		log.Info("stopping")
		return nil
	}

	mem, stopMemory, err := startMemory(ctx, cfg, conn, m, log)
	if err != nil {
		return err
	}
	defer stopMemory()

	if n, err := m.StoredKeyCount(ctx); err == nil && n > 0 {
		cfg.StoredKeys = true
	}
	if err := cfg.CheckExposure(); err != nil {
		return err
	}
	monitor, err := monitoring(cfg, conn)
	if err != nil {
		return err
	}
	defer monitor.Close()
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.Addr, err)
	}
	ln = handlers.WrapListener(ln)
	srv := &http.Server{
		Handler: handlers.NewServer(cfg, handlers.Deps{Manager: m, Memory: mem, Log: log,
			Metrics: metricsHandler(m), MCP: mcpapi.Handler(m, mem, cfg.OpenMode()), Monitoring: monitor}),
		ReadHeaderTimeout: 10 * time.Second,
		// A kept-alive connection waiting for its next request; a body's
		// own deadline is the API's (handlers.DefaultBodyTimeout).
		IdleTimeout: 2 * time.Minute,
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	fmt.Fprintf(stdout, "bgjobs: listening on http://%s\n", ln.Addr())

	select {
	case err := <-errc:
		return fmt.Errorf("http server: %w", err)
	case <-ctx.Done():
	}
	log.Info("stopping")
	shutCtx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(shutCtx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}

// memory is the search index with its writer, as the API uses them.
type memory struct {
	*search.Index
	*search.Writer
}

// startMemory opens (or rebuilds) the index under the data directory and
// starts its writer.
func startMemory(ctx context.Context, cfg bgjobs.Config, conn *redisConn, m *tasks.Manager, log *slog.Logger) (handlers.Memory, func(), error) {
	// One index per namespace: deployments sharing a data directory must
	// not share documents.
	dir := filepath.Join(cfg.DataDir, cfg.Namespace)
	if conn.embedded != nil {
		// The embedded Redis, and so the reports stream, dies with the
		// process: an index kept on disk would outlive what it indexes.
		tmp, err := os.MkdirTemp("", "bgjobs-index")
		if err != nil {
			return nil, nil, err
		}
		dir = tmp
	}
	idx, rebuilt, err := search.Open(dir, log)
	if err != nil {
		return nil, nil, err
	}
	if rebuilt {
		log.Info("search index is new; indexing the reports stream from its start", slog.String("dir", dir))
	}
	w := &search.Writer{RDB: conn.rdb, Stream: m.ReportsStream(), AliveKey: m.IndexerAliveKey(), Index: idx,
		OnIndexed: m.MarkIndexed, Log: log}
	if err := w.Start(ctx); err != nil {
		_ = idx.Close()
		return nil, nil, err
	}
	return memory{idx, w}, func() {
		w.Stop()
		_ = idx.Close()
		if conn.embedded != nil {
			_ = os.RemoveAll(dir)
		}
	}, nil
}

// Reindex rebuilds the search index under cfg.DataDir from the reports
// stream. The serving process must be stopped first.
func Reindex(ctx context.Context, cfg bgjobs.Config, stdout io.Writer) error {
	cfg = cfg.WithDefaults()
	if cfg.RedisURL == "" {
		return bgjobs.FieldError("REDIS_URL", "reindex reads the reports stream of a shared Redis; set REDIS_URL")
	}
	conn, err := openRedis(ctx, cfg.RedisURL)
	if err != nil {
		return err
	}
	defer conn.close()
	m := tasks.NewManager(conn.rdb, cfg, tasks.Deps{Logger: slog.New(slog.DiscardHandler)})
	defer m.Close()
	n, err := search.Rebuild(ctx, filepath.Join(cfg.DataDir, cfg.Namespace), conn.rdb, m.ReportsStream(), slog.New(slog.NewTextHandler(stdout, nil)))
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "bgjobs: rebuilt the search index in %s: %d documents\n", cfg.DataDir, n)
	return nil
}

// metricsHandler serves bgjobs' instruments, asynq's queue collector and
// the Go runtime's, from a registry of this process's own.
func metricsHandler(m *tasks.Manager) http.Handler {
	reg := prometheus.NewRegistry()
	metrics.Register(reg)
	reg.MustRegister(asynqmetrics.NewQueueMetricsCollector(m.Inspector()),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
}

// NewLogger writes one line per event at level or above: readable text on
// a terminal, JSON otherwise (for log shippers).
func NewLogger(w io.Writer, level slog.Leveler) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			return slog.New(slog.NewTextHandler(w, opts))
		}
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

// monitoring is asynqmon on this process's Redis, mounted at /monitoring/.
func monitoring(cfg bgjobs.Config, conn *redisConn) (*asynqmon.HTTPHandler, error) {
	var opt asynq.RedisConnOpt
	if conn.embedded != nil {
		opt = asynq.RedisClientOpt{Addr: conn.embedded.m.Addr()}
	} else {
		var err error
		if opt, err = redisconn.ConnOpt(cfg.RedisURL); err != nil {
			return nil, err
		}
	}
	return asynqmon.New(asynqmon.Options{RootPath: "/monitoring", RedisConnOpt: opt}), nil
}

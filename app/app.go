package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/agents"
	"github.com/bgjobs/bgjobs/handlers"
	"github.com/bgjobs/bgjobs/tasks"
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
	Kinds *tasks.Kinds
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
		log = slog.New(slog.NewJSONHandler(stdout, nil))
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

	runner := agents.NewA2A()
	m := tasks.NewManager(conn.rdb, cfg, tasks.Deps{Kinds: opts.Kinds, Turns: runner, Resumer: runner, Logger: log})
	defer m.Close()
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

	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.Addr, err)
	}
	srv := &http.Server{
		Handler:           handlers.NewServer(cfg, m, log),
		ReadHeaderTimeout: 10 * time.Second,
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

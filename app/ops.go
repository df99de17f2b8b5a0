package app

import (
	"context"
	"log/slog"

	"github.com/redis/go-redis/v9/logging"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/tasks"
)

// OpenManager connects an operator's command to the shared Redis named by
// cfg.RedisURL. close releases it.
func OpenManager(ctx context.Context, cfg bgjobs.Config) (m *tasks.Manager, close func(), err error) {
	cfg = cfg.WithDefaults()
	if cfg.RedisURL == "" {
		return nil, nil, bgjobs.FieldError("REDIS_URL", "operator commands work on a shared Redis; set REDIS_URL or --redis-url")
	}
	// go-redis prints each failed dial of its pool to stderr; a one-shot
	// command's own error says it once, after them, so they are dropped
	// (serve and worker keep them).
	logging.Disable()
	conn, err := openRedis(ctx, cfg.RedisURL)
	if err != nil {
		return nil, nil, err
	}
	m = tasks.NewManager(conn.rdb, cfg, tasks.Deps{Logger: slog.New(slog.DiscardHandler)})
	return m, func() {
		_ = m.Close()
		conn.close()
	}, nil
}

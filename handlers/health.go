package handlers

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/tasks"
)

func handleHealthz() echo.HandlerFunc {
	return func(c echo.Context) error {
		return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
	}
}

// handleReadyz answers 200 only while Redis answers.
func handleReadyz(m *tasks.Manager) echo.HandlerFunc {
	return func(c echo.Context) error {
		ctx, cancel := context.WithTimeout(c.Request().Context(), 2*time.Second)
		defer cancel()
		if err := m.Ping(ctx); err != nil {
			if errors.Is(err, tasks.ErrClusterNode) {
				return &bgjobs.Error{Code: bgjobs.EUnavailable, Message: err.Error()}
			}
			return bgjobs.Unavailable("redis does not answer", err)
		}
		return c.JSON(http.StatusOK, map[string]string{"status": "ready"})
	}
}

// requestLog writes one line per request (health probes apart: they would
// drown the rest).
func requestLog(log *slog.Logger) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			start := time.Now()
			err := next(c)
			if err != nil {
				c.Error(err)
			}
			if p := c.Request().URL.Path; p != "/healthz" && p != "/readyz" && p != "/metrics" {
				log.Info("request", slog.String("method", c.Request().Method), slog.String("path", p),
					slog.Int("status", c.Response().Status), slog.Duration("took", time.Since(start)))
			}
			return nil
		}
	}
}

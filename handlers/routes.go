package handlers

import (
	"log/slog"
	"net/http"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/tasks"
)

// NewServer returns the HTTP API with every route registered.
// mem may be nil in a process that serves no search index: recall and
// knowledge then answer 503.
func NewServer(cfg bgjobs.Config, m *tasks.Manager, mem Memory, log *slog.Logger) http.Handler {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = errorHandler(log)
	e.JSONSerializer = jsonSerializer{}
	e.Use(middleware.Recover())
	e.Use(requestLog(log))
	addRoutes(e, m, mem, newAuthenticator(cfg, m.AgentOfKey))
	return e
}

// addRoutes is the whole URL space of the API, in one place.
func addRoutes(e *echo.Echo, m *tasks.Manager, mem Memory, auth *authenticator) {
	e.GET("/healthz", handleHealthz())
	e.GET("/readyz", handleReadyz(m))

	v1 := e.Group("/v1", auth.middleware)
	v1.PUT("/agents/:name", handlePutAgent(m))
	v1.GET("/agents/:name", handleGetAgent(m))

	v1.POST("/jobs", handleSpawn(m))
	v1.GET("/jobs", handleListJobs(m))
	v1.GET("/jobs/:id", handleGetJob(m))
	v1.POST("/jobs/:id/cancel", handleCancel(m))
	v1.POST("/jobs/:id/ack", handleAck(m))
	v1.DELETE("/jobs/:id", handleDeleteJob(m))

	v1.POST("/batches", handleSpawnBatch(m))
	v1.GET("/batches/:id", handleGetBatch(m))

	v1.GET("/recall", handleRecall(mem))
	v1.POST("/knowledge", handleKnowledge(m, mem))

	// Session ids may contain "/", so the action is the last path segment.
	v1.POST("/sessions/*", handleSessionAction(m))
}

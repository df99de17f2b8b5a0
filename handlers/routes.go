package handlers

import (
	"log/slog"
	"net/http"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/handlers/console"
	"github.com/bgjobs/bgjobs/handlers/openapi"
	"github.com/bgjobs/bgjobs/tasks"
	"github.com/bgjobs/bgjobs/web"
)

// Deps are what the API serves besides its configuration.
type Deps struct {
	// Manager is the job API. Required.
	Manager *tasks.Manager
	// Memory is the search index; nil in a process that serves none
	// (recall and knowledge then answer 503).
	Memory Memory
	// Metrics serves /metrics; nil serves none.
	Metrics http.Handler
	// MCP serves /mcp behind the API's auth; nil serves none.
	MCP http.Handler
	// Monitoring serves asynqmon under /monitoring/ for the admin; nil
	// serves none.
	Monitoring http.Handler
	// Log defaults to slog.Default().
	Log *slog.Logger
}

// NewServer returns the HTTP API with every route registered.
func NewServer(cfg bgjobs.Config, d Deps) http.Handler {
	log := d.Log
	if log == nil {
		log = slog.Default()
	}
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = errorHandler(log)
	e.JSONSerializer = jsonSerializer{}
	e.Use(middleware.Recover())
	e.Use(requestLog(log))
	addRoutes(e, d, newAuthenticator(cfg, d.Manager.AgentOfKey, d.Manager.StoredKeyCount))
	return e
}

// addRoutes is the whole URL space of the API, in one place.
func addRoutes(e *echo.Echo, d Deps, auth *authenticator) {
	m, mem := d.Manager, d.Memory
	e.GET("/healthz", handleHealthz())
	e.GET("/openapi.json", openapi.Handler())
	if d.Metrics != nil {
		e.GET("/metrics", echo.WrapHandler(d.Metrics))
	}
	if d.MCP != nil {
		e.Match([]string{http.MethodGet, http.MethodPost, http.MethodDelete}, "/mcp", echo.WrapHandler(d.MCP), auth.middleware)
	}
	e.GET("/readyz", handleReadyz(m))

	v1 := e.Group("/v1", auth.middleware)
	v1.PUT("/agents/:name", handlePutAgent(m))
	v1.GET("/agents/:name", handleGetAgent(m))

	v1.POST("/jobs", handleSpawn(m))
	v1.GET("/jobs", handleListJobs(m))
	v1.GET("/jobs/:id", byID(m.Get))
	v1.POST("/jobs/:id/cancel", byID(m.Cancel))
	v1.POST("/jobs/:id/ack", handleAck(m))
	v1.DELETE("/jobs/:id", handleDeleteJob(m))

	v1.POST("/batches", handleSpawnBatch(m))
	v1.GET("/batches/:id", byID(m.GetBatch))

	v1.GET("/events", handleEvents(m))
	v1.GET("/recall", handleRecall(mem))
	v1.POST("/knowledge", handleKnowledge(m, mem))

	// The console: pages for people, signed in by key (cookie or header).
	e.GET("/static/*", echo.WrapHandler(http.StripPrefix("/static/", web.Static())), securityHeaders)
	e.GET("/login", handleLoginPage(), securityHeaders)
	e.POST("/login", handleLogin(auth), securityHeaders)
	e.POST("/logout", handleLogout(), securityHeaders)
	pages := e.Group("", securityHeaders, auth.pageAuth)
	cons := console.New(m, mem, pageCaller)
	pages.GET("/", cons.Home)
	pages.GET("/console/jobs/:id", cons.Row)
	pages.POST("/console/jobs/:id/:action", cons.Action, console.Origin)
	pages.GET("/console/batches/:id/state", cons.BatchState)
	pages.GET("/jobs/:id", cons.Viewer)
	pages.GET("/memory", cons.Memory)
	pages.GET("/batches/:id", cons.Batch)
	if d.Monitoring != nil {
		pages.Match([]string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch, http.MethodHead, http.MethodOptions},
			"/monitoring/*", echo.WrapHandler(d.Monitoring), cons.AdminOnly, console.MonitoringHeaders(d.Monitoring), console.MonitoringWakes(m))
	}

	// Session ids may contain "/", so the action is the last path segment.
	v1.POST("/sessions/*", handleSessionAction(m))
}

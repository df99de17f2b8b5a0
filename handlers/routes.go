package handlers

import (
	"cmp"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/handlers/console"
	"github.com/bgjobs/bgjobs/handlers/internal/errshape"
	"github.com/bgjobs/bgjobs/handlers/internal/incoming"
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
	// BodyTimeout bounds how long a request's body may take to arrive;
	// 0 is DefaultBodyTimeout.
	BodyTimeout time.Duration
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
	e.Pre(incoming.BodyDeadline(cmp.Or(d.BodyTimeout, DefaultBodyTimeout)))
	e.Use(middleware.Recover())
	e.Use(requestLog(log))
	addRoutes(e, d, newAuthenticator(cfg, d.Manager))
	return e
}

// addRoutes is the whole URL space of the API, in one place.
func addRoutes(e *echo.Echo, d Deps, auth *authenticator) {
	m, mem := d.Manager, d.Memory
	// The console's security headers go on every response, errors included
	// (a 404 or 401 page is a page too).
	e.Use(securityHeaders)
	e.GET("/healthz", handleHealthz())
	e.GET("/openapi.json", openapi.Handler())
	if d.Metrics != nil {
		e.GET("/metrics", echo.WrapHandler(d.Metrics), scraperAuth(auth.metricsKeys))
	}
	if d.MCP != nil {
		e.Match([]string{http.MethodGet, http.MethodPost, http.MethodDelete}, "/mcp", echo.WrapHandler(errshape.Plain(d.MCP)), auth.middleware)
	}
	e.GET("/readyz", handleReadyz(m))

	// Every /v1 request is authenticated, found or not. The middleware is
	// the server's, not the group's: Echo gives a group with middleware a
	// catch-all route, which would answer a wrong method on a real path
	// 404 instead of 405 with its Allow header.
	e.Use(under("/v1", auth.middleware))
	v1 := e.Group("/v1")
	v1.PUT("/agents/:name", handlePutAgent(m))
	v1.GET("/agents/:name", handleGetAgent(m))

	v1.POST("/jobs", handleSpawn(m))
	v1.GET("/jobs", handleListJobs(m))
	v1.GET("/jobs/:id", byID(m.Get))
	v1.POST("/jobs/:id/cancel", byID(m.Cancel))
	v1.POST("/jobs/:id/ack", handleAck(m))
	v1.POST("/jobs/:id/retry", handleRetry(m))
	v1.DELETE("/jobs/:id", handleDeleteJob(m))

	v1.POST("/batches", handleSpawnBatch(m))
	v1.GET("/batches/:id", byID(m.GetBatch))
	v1.POST("/batches/:id/cancel", handleCancelBatch(m))

	v1.GET("/events", handleEvents(m))
	v1.GET("/recall", handleRecall(mem))
	v1.POST("/knowledge", handleKnowledge(m, mem))

	// The console: pages for people, signed in by key (cookie or header).
	// Sign-in is each page's own middleware, not a group's, for the reason
	// given at /v1.
	e.GET("/static/*", echo.WrapHandler(http.StripPrefix("/static/", web.Static())))
	e.GET("/login", handleLoginPage())
	e.POST("/login", handleLogin(auth))
	e.POST("/logout", handleLogout(auth))
	page := func(method, path string, h echo.HandlerFunc, m ...echo.MiddlewareFunc) {
		e.Add(method, path, h, append([]echo.MiddlewareFunc{auth.pageAuth}, m...)...)
	}
	cons := console.New(m, mem, pageCaller)
	page(http.MethodGet, "/", cons.Home)
	page(http.MethodGet, "/console/jobs/:id", cons.Row)
	page(http.MethodPost, "/console/jobs/:id/:action", cons.Action, console.Origin)
	page(http.MethodGet, "/console/batches/:id/state", cons.BatchState)
	page(http.MethodGet, "/jobs/:id", cons.Viewer)
	page(http.MethodGet, "/memory", cons.Memory)
	page(http.MethodGet, "/batches/:id", cons.Batch)
	if d.Monitoring != nil {
		e.Match([]string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch, http.MethodHead, http.MethodOptions},
			"/monitoring/*", echo.WrapHandler(d.Monitoring), auth.pageAuth, cons.AdminOnly, console.MonitoringHeaders(d.Monitoring), console.MonitoringWakes(m))
	}

	// Session ids may contain "/", so the action is the last path segment.
	v1.POST("/sessions/*", handleSessionAction(m))
}

// WrapListener returns ln with net/http's own plain-text error answers (a
// request it cannot parse) turned into the API's JSON shape.
func WrapListener(ln net.Listener) net.Listener { return errshape.WrapListener(ln) }

// under applies mw to the requests whose path is prefix or below it. Echo
// builds server middleware around each request's handler, so mw is built
// only for the requests it applies to.
func under(prefix string, mw echo.MiddlewareFunc) echo.MiddlewareFunc {
	below := prefix + "/"
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if p := c.Request().URL.Path; p == prefix || strings.HasPrefix(p, below) {
				return mw(next)(c)
			}
			return next(c)
		}
	}
}

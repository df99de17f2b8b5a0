package handlers

import (
	"context"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/handlers/console"
	"github.com/bgjobs/bgjobs/handlers/internal/keys"
	"github.com/bgjobs/bgjobs/tasks"
	"github.com/bgjobs/bgjobs/work"
)

// OpenAgent is the agent every request acts as in open mode.
const OpenAgent = "default"

// caller is who a request acts for.
type caller = keys.Who

const callerKey = "bgjobs.caller"

// callerCtxKey carries the caller in the request's context, for handlers
// mounted as plain http.Handlers (MCP).
type callerCtxKey struct{}

// CallerAgent returns the agent an authenticated request acts for, as the
// API's auth middleware resolved it; "" and false when there is none (an
// admin key that named no agent, or no auth ran).
func CallerAgent(ctx context.Context) (string, bool) {
	who, ok := ctx.Value(callerCtxKey{}).(caller)
	return who.Agent, ok && who.Agent != ""
}

// setCaller records who for Echo handlers and for the request's context.
func setCaller(c echo.Context, who caller) {
	c.Set(callerKey, who)
	ctx := context.WithValue(c.Request().Context(), callerCtxKey{}, who)
	c.SetRequest(c.Request().WithContext(work.WithCaller(ctx, work.Caller{Agent: who.Agent, Admin: who.Admin})))
}

// authenticator admits API and console requests by their key, or by a
// console sign-in made with one.
type authenticator struct {
	*keys.Keys
	m *tasks.Manager
	// metricsKeys are the keys /metrics takes (the metrics key and the
	// admin key); none when no metrics key is set.
	metricsKeys keys.Set
}

func newAuthenticator(cfg bgjobs.Config, m *tasks.Manager) *authenticator {
	a := &authenticator{Keys: keys.New(cfg, m.AgentOfKey, m.StoredKeyCount), m: m}
	if cfg.MetricsKey != "" {
		a.metricsKeys = keys.NewSet(cfg.MetricsKey, cfg.AdminKey)
	}
	return a
}

// scraperAuth admits a /metrics scrape by its bearer key when a set of
// keys is given.
func scraperAuth(set keys.Set) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if len(set) == 0 {
				return next(c)
			}
			key, _ := strings.CutPrefix(c.Request().Header.Get("Authorization"), "Bearer ")
			if !set.Has(strings.TrimSpace(key)) {
				c.Response().Header().Set("WWW-Authenticate", `Bearer realm="bgjobs metrics"`)
				return bgjobs.Errorf(bgjobs.EUnauthenticated, "/metrics needs BGJOBS_METRICS_KEY (or the admin key) as Authorization: Bearer <key>")
			}
			return next(c)
		}
	}
}

// callerOf finds who a request acts for: its bearer key or, on a safe
// (GET) request, its console sign-in cookie — a browser's EventSource
// cannot send headers, only its SameSite=Strict cookie. presented is false
// when the request carries neither.
func (a *authenticator) callerOf(c echo.Context) (who caller, presented, ok bool, err error) {
	ctx := c.Request().Context()
	if key, bearer := strings.CutPrefix(c.Request().Header.Get("Authorization"), "Bearer "); bearer {
		key = strings.TrimSpace(key)
		who, ok, err := a.Lookup(ctx, key)
		return who, key != "", ok, err
	}
	// The cookie signs in page views, and the console's own buttons (htmx
	// from this origin); any other request with side effects needs the
	// header, so no other site can ride on the cookie.
	if c.Request().Method != http.MethodGet && !console.FromConsole(c.Request()) {
		return caller{}, false, false, nil
	}
	ck, err := c.Cookie(signInCookie)
	if err != nil || ck.Value == "" {
		return caller{}, false, false, nil
	}
	who, ok, err = a.signedIn(ctx, ck.Value)
	return who, true, ok, err
}

// signedIn finds who a console sign-in acts for: nobody once it was signed
// out or expired, or once the key it was made with no longer names the
// same agent (revoked, or gone from the configuration).
func (a *authenticator) signedIn(ctx context.Context, token string) (caller, bool, error) {
	in, ok, err := a.m.SignInOf(ctx, token)
	if err != nil || !ok {
		return caller{}, false, err
	}
	who, ok, err := a.LookupDigest(ctx, in.KeyDigest)
	if err != nil || !ok || who.Agent != in.Agent || who.Admin != in.Admin {
		return caller{}, false, err
	}
	return who, true, nil
}

// middleware authenticates every /v1 request and stores the caller.
func (a *authenticator) middleware(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if a.Open(c.Request().Context()) {
			setCaller(c, caller{Agent: OpenAgent, Admin: true})
			return next(c)
		}
		who, presented, ok, err := a.callerOf(c)
		if err != nil {
			return err
		}
		if !presented {
			c.Response().Header().Set("WWW-Authenticate", `Bearer realm="bgjobs"`)
			return bgjobs.Errorf(bgjobs.EUnauthenticated, "missing Authorization: Bearer <key>")
		}
		if !ok {
			c.Response().Header().Set("WWW-Authenticate", `Bearer realm="bgjobs", error="invalid_token"`)
			return bgjobs.Errorf(bgjobs.EUnauthenticated, "unknown key")
		}
		if as := c.Request().Header.Get("X-Bgjobs-Agent"); as != "" {
			if !who.Admin {
				return bgjobs.FieldError("X-Bgjobs-Agent", "only the admin key may act for another agent")
			}
			if err := bgjobs.CheckAgentName("X-Bgjobs-Agent", as); err != nil {
				return err
			}
			who.Agent = as
		}
		setCaller(c, who)
		return next(c)
	}
}

// agentOf returns the agent a request is scoped to; an admin key must name
// one with X-Bgjobs-Agent.
func agentOf(c echo.Context) (string, error) {
	who, _ := c.Get(callerKey).(caller)
	if who.Agent == "" {
		return "", bgjobs.FieldError("X-Bgjobs-Agent", "the admin key must name the agent it acts for in X-Bgjobs-Agent")
	}
	return who.Agent, nil
}

// mayManage reports whether the caller may read or change agent name's
// configuration: the admin, or the agent itself.
func mayManage(c echo.Context, name string) bool {
	who, _ := c.Get(callerKey).(caller)
	return who.Admin || who.Agent == name
}

package handlers

import (
	"context"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/handlers/console"
	"github.com/bgjobs/bgjobs/handlers/internal/keys"
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

// authenticator admits API and console requests by their key.
type authenticator struct{ *keys.Keys }

func newAuthenticator(cfg bgjobs.Config, lookup func(ctx context.Context, key string) (string, error), count func(ctx context.Context) (int64, error)) *authenticator {
	return &authenticator{keys.New(cfg, lookup, count)}
}

// credential is the key a request presents: its bearer token or, on a safe
// (GET) request, the console's sign-in cookie — a browser's EventSource
// cannot send headers, only its SameSite=Strict cookie.
func credential(c echo.Context) string {
	key, ok := strings.CutPrefix(c.Request().Header.Get("Authorization"), "Bearer ")
	if !ok {
		key = "" // only the Bearer scheme carries a key
	}
	// The cookie signs in page views, and the console's own buttons (htmx
	// from this origin); any other request with side effects needs the
	// header, so no other site can ride on the cookie.
	if !ok && (c.Request().Method == http.MethodGet || console.FromConsole(c.Request())) {
		if ck, err := c.Cookie(keyCookie); err == nil {
			key = ck.Value
		}
	}
	return strings.TrimSpace(key)
}

// middleware authenticates every /v1 request and stores the caller.
func (a *authenticator) middleware(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if a.Open(c.Request().Context()) {
			setCaller(c, caller{Agent: OpenAgent, Admin: true})
			return next(c)
		}
		key := credential(c)
		if key == "" {
			c.Response().Header().Set("WWW-Authenticate", `Bearer realm="bgjobs"`)
			return bgjobs.Errorf(bgjobs.EUnauthenticated, "missing Authorization: Bearer <key>")
		}
		who, ok, err := a.Lookup(c.Request().Context(), key)
		if err != nil {
			return err
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

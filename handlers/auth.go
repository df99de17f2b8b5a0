package handlers

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/handlers/console"
	"github.com/bgjobs/bgjobs/work"
)

// OpenAgent is the agent every request acts as in open mode.
const OpenAgent = "default"

// caller is who a request acts for.
type caller struct {
	// agent is the agent the request is scoped to; "" for an admin key
	// with no X-Bgjobs-Agent header.
	agent string
	// admin may manage any agent.
	admin bool
}

const callerKey = "bgjobs.caller"

// callerCtxKey carries the caller in the request's context, for handlers
// mounted as plain http.Handlers (MCP).
type callerCtxKey struct{}

// CallerAgent returns the agent an authenticated request acts for, as the
// API's auth middleware resolved it; "" and false when there is none (an
// admin key that named no agent, or no auth ran).
func CallerAgent(ctx context.Context) (string, bool) {
	who, ok := ctx.Value(callerCtxKey{}).(caller)
	return who.agent, ok && who.agent != ""
}

// setCaller records who for Echo handlers and for the request's context.
func setCaller(c echo.Context, who caller) {
	c.Set(callerKey, who)
	ctx := context.WithValue(c.Request().Context(), callerCtxKey{}, who)
	c.SetRequest(c.Request().WithContext(work.WithCaller(ctx, work.Caller{Agent: who.agent, Admin: who.admin})))
}

// authenticator checks bearer keys. Keys are compared as SHA-256 digests in
// constant time, against every configured key, so neither timing nor
// length tells a guess how close it came.
type authenticator struct {
	// open is true in open mode (no key anywhere) until a stored key
	// appears: isOpen checks for one at most every openRecheck.
	open    atomic.Bool
	checked atomic.Int64
	count   func(ctx context.Context) (int64, error)
	agents  []keyEntry
	admin   *[32]byte
	// stored looks up keys made with `bgjobs keys create` (kept in Redis
	// as digests), through a short cache so revocation takes effect
	// within storedKeyTTL.
	stored *storedKeys
}

type keyEntry struct {
	sum   [32]byte
	agent string
}

func newAuthenticator(cfg bgjobs.Config, lookup func(ctx context.Context, key string) (string, error), count func(ctx context.Context) (int64, error)) *authenticator {
	a := &authenticator{count: count, stored: &storedKeys{lookup: lookup, cache: map[string]storedKey{}}}
	a.open.Store(cfg.OpenMode())
	for key, agent := range cfg.APIKeys {
		a.agents = append(a.agents, keyEntry{sha256.Sum256([]byte(key)), agent})
	}
	if cfg.AdminKey != "" {
		sum := sha256.Sum256([]byte(cfg.AdminKey))
		a.admin = &sum
	}
	return a
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

// lookup finds the caller of a key: a configured key first, then one made
// with `bgjobs keys create`.
func (a *authenticator) lookup(ctx context.Context, key string) (caller, bool, error) {
	if key == "" {
		return caller{}, false, nil
	}
	if who, ok := a.resolve(key); ok {
		return who, true, nil
	}
	agent, err := a.stored.get(ctx, key)
	if err != nil || agent == "" {
		return caller{}, false, err
	}
	return caller{agent: agent}, true, nil
}

// resolve returns the caller of a configured key, or false.
func (a *authenticator) resolve(key string) (caller, bool) {
	sum := sha256.Sum256([]byte(key))
	found := caller{}
	ok := 0
	for _, e := range a.agents {
		if subtle.ConstantTimeCompare(sum[:], e.sum[:]) == 1 {
			found, ok = caller{agent: e.agent}, 1
		}
	}
	if a.admin != nil && subtle.ConstantTimeCompare(sum[:], a.admin[:]) == 1 {
		found, ok = caller{admin: true}, 1
	}
	return found, ok == 1
}

// openRecheck bounds how long open mode outlives the first key made with
// `bgjobs keys create` while the server runs.
const openRecheck = 2 * time.Second

// isOpen reports open mode: no key configured and none stored yet. Once a
// stored key appears (checked at most every openRecheck) it ends for good.
func (a *authenticator) isOpen(ctx context.Context) bool {
	if !a.open.Load() {
		return false
	}
	now, last := time.Now().UnixMilli(), a.checked.Load()
	if now-last >= openRecheck.Milliseconds() && a.checked.CompareAndSwap(last, now) {
		if n, err := a.count(ctx); err == nil && n > 0 {
			a.open.Store(false)
		}
	}
	return a.open.Load()
}

// middleware authenticates every /v1 request and stores the caller.
func (a *authenticator) middleware(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if a.isOpen(c.Request().Context()) {
			setCaller(c, caller{agent: OpenAgent, admin: true})
			return next(c)
		}
		key := credential(c)
		if key == "" {
			c.Response().Header().Set("WWW-Authenticate", `Bearer realm="bgjobs"`)
			return bgjobs.Errorf(bgjobs.EUnauthenticated, "missing Authorization: Bearer <key>")
		}
		who, ok, err := a.lookup(c.Request().Context(), key)
		if err != nil {
			return err
		}
		if !ok {
			c.Response().Header().Set("WWW-Authenticate", `Bearer realm="bgjobs", error="invalid_token"`)
			return bgjobs.Errorf(bgjobs.EUnauthenticated, "unknown key")
		}
		if as := c.Request().Header.Get("X-Bgjobs-Agent"); as != "" {
			if !who.admin {
				return bgjobs.FieldError("X-Bgjobs-Agent", "only the admin key may act for another agent")
			}
			if err := bgjobs.CheckAgentName("X-Bgjobs-Agent", as); err != nil {
				return err
			}
			who.agent = as
		}
		setCaller(c, who)
		return next(c)
	}
}

// agentOf returns the agent a request is scoped to; an admin key must name
// one with X-Bgjobs-Agent.
func agentOf(c echo.Context) (string, error) {
	who, _ := c.Get(callerKey).(caller)
	if who.agent == "" {
		return "", bgjobs.FieldError("X-Bgjobs-Agent", "the admin key must name the agent it acts for in X-Bgjobs-Agent")
	}
	return who.agent, nil
}

// mayManage reports whether the caller may read or change agent name's
// configuration: the admin, or the agent itself.
func mayManage(c echo.Context, name string) bool {
	who, _ := c.Get(callerKey).(caller)
	return who.admin || who.agent == name
}

// storedKeyTTL is how long a stored key's lookup is trusted.
const storedKeyTTL = 5 * time.Second

type storedKeys struct {
	lookup func(ctx context.Context, key string) (string, error)
	mu     sync.Mutex
	cache  map[string]storedKey
}

type storedKey struct {
	agent string
	exp   time.Time
}

func (s *storedKeys) get(ctx context.Context, key string) (string, error) {
	if s.lookup == nil {
		return "", nil
	}
	d := sha256.Sum256([]byte(key))
	id := string(d[:])
	s.mu.Lock()
	if e, ok := s.cache[id]; ok && time.Now().Before(e.exp) {
		s.mu.Unlock()
		return e.agent, nil
	}
	s.mu.Unlock()
	agent, err := s.lookup(ctx, key)
	if err != nil {
		return "", err
	}
	s.mu.Lock()
	if len(s.cache) > 10000 {
		clear(s.cache) // a flood of wrong keys must not grow this forever
	}
	s.cache[id] = storedKey{agent: agent, exp: time.Now().Add(storedKeyTTL)}
	s.mu.Unlock()
	return agent, nil
}

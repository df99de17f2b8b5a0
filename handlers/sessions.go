package handlers

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/handlers/internal/incoming"
	"github.com/bgjobs/bgjobs/tasks"
)

// handleSessionAction routes POST /v1/sessions/{session}/{action}; the
// session id may itself contain slashes.
func handleSessionAction(m *tasks.Manager) echo.HandlerFunc {
	drain, busy, idle := handleDrain(m), handleBusy(m), handleIdle(m)
	return func(c echo.Context) error {
		rest := strings.TrimPrefix(c.Request().URL.Path, "/v1/sessions/")
		i := strings.LastIndex(rest, "/")
		if i <= 0 {
			return bgjobs.Errorf(bgjobs.ENotFound, "want /v1/sessions/{session}/drain")
		}
		session, action := rest[:i], rest[i+1:]
		switch action {
		case "drain":
			return drain(c, session)
		case "busy":
			return busy(c, session)
		case "idle":
			return idle(c, session)
		}
		return bgjobs.Errorf(bgjobs.ENotFound, "no session action %q", action)
	}
}

type drainResponse struct {
	Notifications []bgjobs.Notification `json:"notifications"`
	// More is true when more results wait beyond this page: drain again.
	More bool `json:"more"`
}

func handleDrain(m *tasks.Manager) func(echo.Context, string) error {
	return func(c echo.Context, session string) error {
		agent, err := agentOf(c)
		if err != nil {
			return err
		}
		idem := c.Request().Header.Get("Idempotency-Key")
		if len(idem) > 255 {
			return bgjobs.FieldError("Idempotency-Key", "at most 255 characters")
		}
		q, err := incoming.Query(c)
		if err != nil {
			return err
		}
		limit := tasks.DrainPageDefault
		if s := q.Get("limit"); s != "" {
			if limit, err = strconv.Atoi(s); err != nil {
				return bgjobs.FieldError("limit", "not a number: %q", s)
			}
		}
		incoming.WatchHangup(c)
		ns, more, err := m.DrainPage(c.Request().Context(), agent, session, idem, limit)
		if err != nil {
			return err
		}
		if ns == nil {
			ns = []bgjobs.Notification{}
		}
		return c.JSON(http.StatusOK, drainResponse{Notifications: ns, More: more})
	}
}

type busyBody struct {
	TTLS *int64 `json:"ttl_s"`
}

type busyResponse struct {
	Session string `json:"session"`
	Busy    bool   `json:"busy"`
}

// handleBusy starts or extends the session's busy lease: resumes are held
// until idle or until the lease lapses.
func handleBusy(m *tasks.Manager) func(echo.Context, string) error {
	return func(c echo.Context, session string) error {
		agent, err := agentOf(c)
		if err != nil {
			return err
		}
		var b busyBody
		if err := decodeOptionalBody(c, &b); err != nil {
			return err
		}
		ttl := tasks.BusyTTLDefault
		if b.TTLS != nil {
			// Range-checked before the multiplication can wrap; Busy's own
			// check says the same, so 0 and -5 read alike.
			if n := *b.TTLS; n < 1 || n > int64(tasks.BusyTTLMax/time.Second) {
				return bgjobs.FieldError("ttl_s", "between 1 and %d", int64(tasks.BusyTTLMax/time.Second))
			}
			ttl = time.Duration(*b.TTLS) * time.Second
		}
		if err := m.Busy(c.Request().Context(), agent, session, ttl); err != nil {
			return err
		}
		return c.JSON(http.StatusOK, busyResponse{Session: session, Busy: true})
	}
}

func handleIdle(m *tasks.Manager) func(echo.Context, string) error {
	return func(c echo.Context, session string) error {
		agent, err := agentOf(c)
		if err != nil {
			return err
		}
		if err := m.Idle(c.Request().Context(), agent, session); err != nil {
			return err
		}
		return c.JSON(http.StatusOK, busyResponse{Session: session, Busy: false})
	}
}

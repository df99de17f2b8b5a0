package handlers

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/handlers/internal/incoming"
	"github.com/bgjobs/bgjobs/tasks"
	"github.com/bgjobs/bgjobs/tasks/eventhub"
)

// sseKeepAlive is how often an idle stream sends a comment, so proxies and
// clients keep the connection.
const sseKeepAlive = 15 * time.Second

// handleEvents streams the caller's events as Server-Sent Events. Each event
// id is its entry in the agent's capped stream, so a client that reconnects
// with Last-Event-ID gets every event it missed, in order, then the live
// ones: the stream is read, not a pub/sub channel, so nothing falls between.
// The admin key sees every agent, or one with ?agent=. Every stream of the
// process shares one Redis read (the Manager's event hub); an agent holding
// its most open streams gets 429.
func handleEvents(m *tasks.Manager) echo.HandlerFunc {
	return func(c echo.Context) error {
		who, _ := c.Get(callerKey).(caller)
		ctx := c.Request().Context()
		q, err := incoming.Query(c)
		if err != nil {
			return err
		}
		var agents []string
		switch a := q.Get("agent"); {
		case a != "" && (who.Admin || a == who.Agent):
			if err := bgjobs.CheckAgentName("agent", a); err != nil {
				return err
			}
			agents = []string{a}
		case a != "":
			return bgjobs.Errorf(bgjobs.ENotFound, "no agent %s", a)
		case who.Agent != "":
			agents = []string{who.Agent}
		case who.Admin:
			all, err := m.EventAgents(ctx)
			if err != nil {
				return err
			}
			agents = all
		}
		last, field := c.Request().Header.Get("Last-Event-ID"), "Last-Event-ID"
		if last == "" {
			last, field = q.Get("last_event_id"), "last_event_id"
		}
		if last != "" && !eventhub.ValidID(last) {
			return bgjobs.FieldError(field, "not an event id this API sent: %q", bgjobs.CutRunes(last, 64))
		}
		after := map[string]string{}
		for _, a := range agents {
			after[a] = "$"
			if last != "" {
				// Ids from one agent's stream are times: the same cut works
				// across several streams.
				after[a] = last
			}
		}
		if len(agents) > 0 && last == "" {
			for _, a := range agents {
				id, err := m.LastEventID(ctx, a)
				if err != nil {
					return err
				}
				after[a] = id
			}
		}
		owner := who.Agent
		if who.Admin && q.Get("agent") == "" {
			owner = ""
		}
		sub, err := m.SubscribeEvents(owner, after)
		if err != nil {
			return err
		}
		defer sub.Close()
		w := c.Response()
		w.Header().Set(echo.HeaderContentType, "text/event-stream")
		w.Header().Set("Cache-Control", "no-cache")
		w.Header().Set("X-Accel-Buffering", "no")
		w.WriteHeader(http.StatusOK)
		fmt.Fprint(w, ": connected\n\n")
		w.Flush()
		beat := time.NewTicker(sseKeepAlive)
		defer beat.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-beat.C:
				fmt.Fprint(w, ": keep-alive\n\n")
				w.Flush()
			case e, ok := <-sub.C:
				if !ok {
					// Fell behind: the client reconnects with Last-Event-ID.
					fmt.Fprintf(w, ": %s\n\n", strings.ReplaceAll(fmt.Sprint(sub.Err()), "\n", " "))
					w.Flush()
					return nil
				}
				fmt.Fprintf(w, "id: %s\nevent: %s\ndata: %s\n\n", e.ID, e.Type, e.Data)
				// Flush once the burst is written.
				if len(sub.C) == 0 {
					w.Flush()
				}
			}
		}
	}
}

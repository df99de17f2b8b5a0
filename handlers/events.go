package handlers

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/tasks"
)

// sseKeepAlive is how often an idle stream sends a comment, so proxies and
// clients keep the connection.
const sseKeepAlive = 15 * time.Second

// handleEvents streams the caller's events as Server-Sent Events. Each event
// id is its entry in the agent's capped stream, so a client that reconnects
// with Last-Event-ID gets every event it missed, in order, then the live
// ones: the stream is read, not a pub/sub channel, so nothing falls between.
// The admin key sees every agent, or one with ?agent=.
func handleEvents(m *tasks.Manager) echo.HandlerFunc {
	return func(c echo.Context) error {
		who, _ := c.Get(callerKey).(caller)
		ctx := c.Request().Context()
		var agents []string
		switch a := c.QueryParam("agent"); {
		case a != "" && (who.admin || a == who.agent):
			if err := bgjobs.CheckAgentName("agent", a); err != nil {
				return err
			}
			agents = []string{a}
		case a != "":
			return bgjobs.Errorf(bgjobs.ENotFound, "no agent %s", a)
		case who.agent != "":
			agents = []string{who.agent}
		case who.admin:
			all, err := m.EventAgents(ctx)
			if err != nil {
				return err
			}
			agents = all
		}
		last := c.Request().Header.Get("Last-Event-ID")
		if last == "" {
			last = c.QueryParam("last_event_id")
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
		w := c.Response()
		w.Header().Set(echo.HeaderContentType, "text/event-stream")
		w.Header().Set("Cache-Control", "no-cache")
		w.Header().Set("X-Accel-Buffering", "no")
		w.WriteHeader(http.StatusOK)
		fmt.Fprint(w, ": connected\n\n")
		w.Flush()
		if len(agents) == 0 {
			<-ctx.Done()
			return nil
		}
		lastBeat := time.Now()
		for ctx.Err() == nil {
			events, next, err := m.ReadEvents(ctx, after, 5*time.Second)
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				fmt.Fprintf(w, ": error %s\n\n", strings.ReplaceAll(err.Error(), "\n", " "))
				w.Flush()
				time.Sleep(time.Second)
				continue
			}
			after = next
			for _, e := range events {
				fmt.Fprintf(w, "id: %s\nevent: %s\ndata: %s\n\n", e.ID, e.Type, e.Data)
			}
			if len(events) > 0 || time.Since(lastBeat) > sseKeepAlive {
				if len(events) == 0 {
					fmt.Fprint(w, ": keep-alive\n\n")
				}
				w.Flush()
				lastBeat = time.Now()
			}
		}
		return nil
	}
}

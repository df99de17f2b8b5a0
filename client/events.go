package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// Event is one entry of an agent's event stream (GET /v1/events).
type Event struct {
	// ID resumes the stream after this event (Last-Event-ID).
	ID string
	// Type is background.started, background.completed, batch.joined, …
	Type string
	// Data is the event's JSON body.
	Data json.RawMessage
}

// Decode reads the event's body into v.
func (e Event) Decode(v any) error { return json.Unmarshal(e.Data, v) }

// Events streams the agent's events to fn until ctx ends, the server ends
// the stream, or fn returns an error (which Events returns). With
// lastEventID it starts after that event, so a reconnect misses nothing;
// "" starts with the next event. The stream is display only: results come
// through Drain.
func (c *Client) Events(ctx context.Context, lastEventID string, fn func(Event) error) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.BaseURL+"/v1/events", nil)
	if err != nil {
		return err
	}
	c.authorize(req)
	req.Header.Set("Accept", "text/event-stream")
	if lastEventID != "" {
		req.Header.Set("Last-Event-ID", lastEventID)
	}
	// The stream stays open: no overall timeout, only ctx.
	resp, err := (&http.Client{Transport: c.httpClient().Transport}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return apiError(resp, raw)
	}
	r := bufio.NewReader(resp.Body)
	var ev Event
	for {
		line, err := r.ReadBytes('\n')
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if err == io.EOF {
				return nil
			}
			return err
		}
		line = bytes.TrimRight(line, "\r\n")
		field, value, _ := strings.Cut(string(line), ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "id":
			ev.ID = value
		case "event":
			ev.Type = value
		case "data":
			ev.Data = append(ev.Data, value...)
		case "":
			if len(line) == 0 && ev.Data != nil {
				if err := fn(ev); err != nil {
					return err
				}
				ev = Event{}
			}
			// a line starting with ':' is a comment
		}
	}
}

// String shows an event for logs.
func (e Event) String() string { return fmt.Sprintf("%s %s %s", e.ID, e.Type, e.Data) }

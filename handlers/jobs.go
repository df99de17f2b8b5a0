package handlers

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/handlers/internal/incoming"
	"github.com/bgjobs/bgjobs/tasks"
)

type spawnBody struct {
	OriginSession string           `json:"origin_session"`
	Kind          string           `json:"kind"`
	SubagentType  string           `json:"subagent_type"`
	Description   string           `json:"description"`
	Prompt        string           `json:"prompt"`
	Incognito     bool             `json:"incognito"`
	Work          *bgjobs.WorkSpec `json:"work"`
	WaitMS        int64            `json:"wait_ms"`
	TurnID        string           `json:"turn_id"`
	StartInS      int64            `json:"start_in_s"`
	TimeoutS      int64            `json:"timeout_s"`
}

type spawnResponse struct {
	ID      string        `json:"id"`
	Status  bgjobs.Status `json:"status"`
	BatchID *string       `json:"batch_id"`
	Message string        `json:"message"`
}

func (b spawnBody) request(agent, idemKey string) (tasks.SpawnRequest, error) {
	wait, err := bgjobs.Within("wait_ms", b.WaitMS, time.Millisecond, tasks.WaitMax)
	if err != nil {
		return tasks.SpawnRequest{}, err
	}
	startIn, err := bgjobs.Within("start_in_s", b.StartInS, time.Second, tasks.StartInMax)
	if err != nil {
		return tasks.SpawnRequest{}, err
	}
	return tasks.SpawnRequest{Wait: wait, StartIn: startIn,
		Agent: agent, OriginSession: b.OriginSession, Kind: bgjobs.Kind(b.Kind),
		SubagentType: b.SubagentType, Description: b.Description, Prompt: b.Prompt,
		Work: b.Work, Incognito: b.Incognito, IdempotencyKey: idemKey, TurnID: b.TurnID, TimeoutS: b.TimeoutS,
	}, nil
}

func handleSpawn(m *tasks.Manager) echo.HandlerFunc {
	return func(c echo.Context) error {
		agent, err := agentOf(c)
		if err != nil {
			return err
		}
		var body spawnBody
		if err := decodeBody(c, &body); err != nil {
			return err
		}
		idem := c.Request().Header.Get("Idempotency-Key")
		if len(idem) > 255 {
			return bgjobs.FieldError("Idempotency-Key", "at most 255 characters")
		}
		req, err := body.request(agent, idem)
		if err != nil {
			return err
		}
		j, existed, delivered, err := m.SpawnAndWait(c.Request().Context(), req)
		if err != nil {
			if j != nil && c.Request().Context().Err() != nil {
				return nil // the client hung up; the job carries on in the background
			}
			return err
		}
		if delivered {
			// It ended within the budget: the caller has the result now.
			return c.JSON(http.StatusOK, j)
		}
		status := http.StatusAccepted
		if existed {
			status = http.StatusOK
		}
		return c.JSON(status, spawnResponse{ID: j.ID, Status: j.Status, BatchID: j.BatchID, Message: bgjobs.SpawnMessage(j)})
	}
}

type listResponse struct {
	Jobs       []*bgjobs.Job `json:"jobs"`
	NextCursor *string       `json:"next_cursor"`
}

func handleListJobs(m *tasks.Manager) echo.HandlerFunc {
	return func(c echo.Context) error {
		agent, err := agentOf(c)
		if err != nil {
			return err
		}
		q, err := incoming.Query(c)
		if err != nil {
			return err
		}
		req := tasks.ListRequest{Agent: agent, Session: q.Get("session"), Status: q.Get("status"),
			BatchID: q.Get("batch_id"), Cursor: q.Get("cursor")}
		if s := q.Get("limit"); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil {
				return bgjobs.FieldError("limit", "not an integer: %q", s)
			}
			req.Limit = n
		}
		jobs, next, err := m.List(c.Request().Context(), req)
		if err != nil {
			return err
		}
		resp := listResponse{Jobs: jobs}
		if resp.Jobs == nil {
			resp.Jobs = []*bgjobs.Job{}
		}
		if next != "" {
			resp.NextCursor = &next
		}
		return c.JSON(http.StatusOK, resp)
	}
}

// byID answers 200 with what call returns for the caller's resource named
// by the path's id.
func byID[T any](call func(ctx context.Context, agent, id string) (T, error)) echo.HandlerFunc {
	return func(c echo.Context) error {
		agent, err := agentOf(c)
		if err != nil {
			return err
		}
		v, err := call(c.Request().Context(), agent, c.Param("id"))
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, v)
	}
}

func handleAck(m *tasks.Manager) echo.HandlerFunc {
	ack := byID(func(ctx context.Context, agent, id string) (map[string]bool, error) {
		flipped, err := m.Ack(ctx, agent, id)
		return map[string]bool{"acked": flipped}, err
	})
	return func(c echo.Context) error {
		incoming.WatchHangup(c)
		return ack(c)
	}
}

func handleDeleteJob(m *tasks.Manager) echo.HandlerFunc {
	return func(c echo.Context) error {
		agent, err := agentOf(c)
		if err != nil {
			return err
		}
		if err := m.Delete(c.Request().Context(), agent, c.Param("id")); err != nil {
			return err
		}
		return c.NoContent(http.StatusNoContent)
	}
}

// retryBody is POST /v1/jobs/{id}/retry's optional body.
type retryBody struct {
	// Force runs a completed job again too.
	Force bool `json:"force"`
}

// handleRetry runs one of the caller's ended jobs again: the same id, a new
// attempt, its new outcome drained once like the first.
func handleRetry(m *tasks.Manager) echo.HandlerFunc {
	return func(c echo.Context) error {
		agent, err := agentOf(c)
		if err != nil {
			return err
		}
		var b retryBody
		if err := decodeOptionalBody(c, &b); err != nil {
			return err
		}
		j, err := m.RetryFor(c.Request().Context(), agent, c.Param("id"), b.Force)
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, j)
	}
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

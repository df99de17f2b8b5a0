package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/handlers/internal/incoming"
	"github.com/bgjobs/bgjobs/tasks"
)

type batchBody struct {
	OriginSession string            `json:"origin_session"`
	Jobs          []json.RawMessage `json:"jobs"`
}

// batchJob is one spec of a batch: a spawn without its own session.
type batchJob struct {
	Kind         string           `json:"kind"`
	SubagentType string           `json:"subagent_type"`
	Description  string           `json:"description"`
	Prompt       string           `json:"prompt"`
	Incognito    bool             `json:"incognito"`
	Work         *bgjobs.WorkSpec `json:"work"`
	TimeoutS     int64            `json:"timeout_s"`
}

// handleSpawnBatch fans out; specs that do not even decode are skipped and
// reported like those the domain rejects.
func handleSpawnBatch(m *tasks.Manager) echo.HandlerFunc {
	return func(c echo.Context) error {
		agent, err := agentOf(c)
		if err != nil {
			return err
		}
		raw, err := incoming.Body(c)
		if err != nil {
			return err
		}
		session, specs, err := decodeBatch(raw)
		if err != nil {
			return err
		}
		res, err := m.SpawnBatch(c.Request().Context(), agent, session, specs)
		if err != nil {
			return err
		}
		return c.JSON(http.StatusAccepted, res)
	}
}

// batchTyped is a batch with its members decoded in the same pass.
type batchTyped struct {
	OriginSession string     `json:"origin_session"`
	Jobs          []batchJob `json:"jobs"`
}

// decodeBatch decodes a batch request in one pass, half the time of
// decoding each member on its own (BenchmarkDecodeBatch). A request with a
// member that does not decode goes member by member instead, so that member
// alone is reported invalid and the rest still spawn; the two ways give the
// same specs (FuzzDecodeBatch).
func decodeBatch(raw []byte) (session string, specs []tasks.SpawnRequest, err error) {
	var typed batchTyped
	if decodeJSON(raw, &typed) != nil {
		return decodeBatchByMember(raw)
	}
	specs = make([]tasks.SpawnRequest, len(typed.Jobs))
	for i, j := range typed.Jobs {
		specs[i] = j.request()
	}
	return typed.OriginSession, specs, nil
}

// decodeBatchByMember decodes each member on its own.
func decodeBatchByMember(raw []byte) (session string, specs []tasks.SpawnRequest, err error) {
	var body batchBody
	if err := decodeJSON(raw, &body); err != nil {
		return "", nil, err
	}
	specs = make([]tasks.SpawnRequest, len(body.Jobs))
	for i, raw := range body.Jobs {
		var j batchJob
		if err := decodeJSON(raw, &j); err != nil {
			var be *bgjobs.Error
			errors.As(err, &be)
			specs[i] = tasks.SpawnRequest{Invalid: be}
			continue
		}
		specs[i] = j.request()
	}
	return body.OriginSession, specs, nil
}

func (j batchJob) request() tasks.SpawnRequest {
	return tasks.SpawnRequest{Kind: bgjobs.Kind(j.Kind), SubagentType: j.SubagentType,
		Description: j.Description, Prompt: j.Prompt, Incognito: j.Incognito, Work: j.Work, TimeoutS: j.TimeoutS}
}

// cancelBatchResponse is the batch after its cancel, and how many members
// the cancel stopped.
type cancelBatchResponse struct {
	*bgjobs.Batch
	Cancelled int `json:"cancelled"`
}

// handleCancelBatch stops every member of the caller's batch that has not
// ended.
func handleCancelBatch(m *tasks.Manager) echo.HandlerFunc {
	return byID(func(ctx context.Context, agent, id string) (cancelBatchResponse, error) {
		b, n, err := m.CancelBatch(ctx, agent, id)
		return cancelBatchResponse{Batch: b, Cancelled: n}, err
	})
}

package handlers

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/bgjobs/bgjobs"
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
}

// handleSpawnBatch fans out; specs that do not even decode are skipped and
// reported like those the domain rejects.
func handleSpawnBatch(m *tasks.Manager) echo.HandlerFunc {
	return func(c echo.Context) error {
		agent, err := agentOf(c)
		if err != nil {
			return err
		}
		var body batchBody
		if err := decodeBody(c, &body); err != nil {
			return err
		}
		specs := make([]tasks.SpawnRequest, len(body.Jobs))
		for i, raw := range body.Jobs {
			var j batchJob
			if err := decodeJSON(raw, &j); err != nil {
				var be *bgjobs.Error
				errors.As(err, &be)
				specs[i] = tasks.SpawnRequest{Invalid: be}
				continue
			}
			specs[i] = tasks.SpawnRequest{Kind: bgjobs.Kind(j.Kind), SubagentType: j.SubagentType,
				Description: j.Description, Prompt: j.Prompt, Incognito: j.Incognito, Work: j.Work}
		}
		res, err := m.SpawnBatch(c.Request().Context(), agent, body.OriginSession, specs)
		if err != nil {
			return err
		}
		return c.JSON(http.StatusAccepted, res)
	}
}

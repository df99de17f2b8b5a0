package handlers

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/tasks"
)

type agentBody struct {
	A2AURL        string            `json:"a2a_url"`
	Resume        string            `json:"resume"`
	WebhookURL    string            `json:"webhook_url"`
	WebhookSecret string            `json:"webhook_secret"`
	AutoResume    *bool             `json:"auto_resume"`
	SubagentTypes map[string]string `json:"subagent_types"`
}

// redacted is what GET shows of an agent: never its webhook secret.
func redacted(a *bgjobs.Agent) map[string]any {
	auto := true
	if a.AutoResume != nil {
		auto = *a.AutoResume
	}
	secret := ""
	if a.WebhookSecret != "" {
		secret = "[redacted]"
	}
	types := a.SubagentTypes
	if types == nil {
		types = map[string]string{}
	}
	return map[string]any{
		"name": a.Name, "a2a_url": a.A2AURL, "resume": a.Resume, "webhook_url": a.WebhookURL,
		"webhook_secret": secret, "auto_resume": auto, "subagent_types": types,
	}
}

func handlePutAgent(m *tasks.Manager) echo.HandlerFunc {
	return func(c echo.Context) error {
		name, err := managedAgent(c)
		if err != nil {
			return err
		}
		var b agentBody
		if err = decodeBody(c, &b); err != nil {
			return err
		}
		a := &bgjobs.Agent{Name: name, A2AURL: b.A2AURL, Resume: b.Resume, WebhookURL: b.WebhookURL,
			WebhookSecret: b.WebhookSecret, AutoResume: b.AutoResume, SubagentTypes: b.SubagentTypes}
		if err = m.PutAgent(c.Request().Context(), a); err != nil {
			return err
		}
		return c.JSON(http.StatusOK, redacted(a))
	}
}

func handleGetAgent(m *tasks.Manager) echo.HandlerFunc {
	return func(c echo.Context) error {
		name, err := managedAgent(c)
		if err != nil {
			return err
		}
		a, err := m.GetAgent(c.Request().Context(), name)
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, redacted(a))
	}
}

// managedAgent returns the agent named in the path, if the caller may
// manage it; another agent's configuration does not exist for the caller.
func managedAgent(c echo.Context) (string, error) {
	name := c.Param("name")
	if err := bgjobs.CheckAgentName("name", name); err != nil {
		return "", err
	}
	if !mayManage(c, name) {
		return "", bgjobs.Errorf(bgjobs.ENotFound, "no agent %s", name)
	}
	return name, nil
}

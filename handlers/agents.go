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
	// DelegateTo is set by the admin only; absent keeps what is stored.
	DelegateTo *[]string `json:"delegate_to"`
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
		"delegate_to": append([]string{}, a.DelegateTo...),
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
		who, _ := c.Get(callerKey).(caller)
		switch {
		case b.DelegateTo != nil && !who.Admin:
			return bgjobs.FieldError("delegate_to", "only the admin key sets which agents an agent may delegate to")
		case b.DelegateTo != nil:
			a.DelegateTo = *b.DelegateTo
		default:
			prev, err := m.GetAgent(c.Request().Context(), name)
			if err != nil && bgjobs.ErrorCode(err) != bgjobs.ENotFound {
				return err
			}
			if prev != nil {
				a.DelegateTo = prev.DelegateTo
			}
		}
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

package tasks

import "context"

// Agent is where bgjobs reaches an agent, kept in Redis.
type Agent struct {
	Name          string            `json:"name"`
	A2AURL        string            `json:"a2a_url"`
	Resume        string            `json:"resume"`
	WebhookURL    string            `json:"webhook_url"`
	WebhookSecret string            `json:"webhook_secret,omitempty"`
	AutoResume    *bool             `json:"auto_resume,omitempty"`
	SubagentTypes map[string]string `json:"subagent_types,omitempty"`
}

// Resume modes of an agent.
const (
	ResumeA2A     = "a2a"
	ResumeWebhook = "webhook"
	ResumeNone    = "none"
)

// Turn is everything a TurnRunner needs to run one turn job.
type Turn struct {
	AgentURL      string
	JobID         string
	OriginSession string
	SubagentType  string
	// Preamble is the subagent type's role text, sent before the prompt.
	Preamble string
	Prompt   string
	// Progress, when set, is told of each update a streaming agent sends
	// before its final answer.
	Progress func(state, text string)
}

// TurnRunner runs a turn on an agent and returns its report. An error
// marked Retryable is tried again with the same message id; any other
// fails the job.
type TurnRunner interface {
	RunTurn(ctx context.Context, t Turn) (string, error)
}

package tasks

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"time"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/internal/netguard"
	"github.com/bgjobs/bgjobs/tasks/internal/registry/tenants"
)

// PutAgent stores where bgjobs reaches an agent.
func (m *Manager) PutAgent(ctx context.Context, a *bgjobs.Agent) error {
	if err := bgjobs.CheckAgentName("name", a.Name); err != nil {
		return err
	}
	if a.Resume == "" {
		a.Resume = bgjobs.ResumeNone
		if a.A2AURL != "" {
			a.Resume = bgjobs.ResumeA2A
		}
	}
	switch a.Resume {
	case bgjobs.ResumeA2A:
		if a.A2AURL == "" {
			return bgjobs.FieldError("a2a_url", "resume a2a needs a2a_url")
		}
	case bgjobs.ResumeWebhook:
		if a.WebhookURL == "" {
			return bgjobs.FieldError("webhook_url", "resume webhook needs webhook_url")
		}
		if a.WebhookSecret == "" {
			return bgjobs.FieldError("webhook_secret", "resume webhook needs webhook_secret to sign with")
		}
	case bgjobs.ResumeNone:
	default:
		return bgjobs.FieldError("resume", "want a2a, webhook or none, got %q", a.Resume)
	}
	for _, u := range []struct{ field, url string }{{"a2a_url", a.A2AURL}, {"webhook_url", a.WebhookURL}} {
		if u.url == "" {
			continue
		}
		if err := netguard.CheckURL(u.url, m.agentAllow, "BGJOBS_AGENT_ALLOW"); err != nil {
			return bgjobs.FieldError(u.field, "%v", err)
		}
	}
	for _, name := range a.DelegateTo {
		if err := bgjobs.CheckAgentName("delegate_to", name); err != nil {
			return err
		}
	}
	for name := range a.SubagentTypes {
		if name == "" || len(name) > 64 {
			return bgjobs.FieldError("subagent_types", "subagent type names are 1–64 characters")
		}
	}
	if err := m.tenants.PutAgent(ctx, a); err != nil {
		return err
	}
	m.follow.ForgetAgent(a.Name)
	return nil
}

// GetAgent returns an agent's configuration, or not_found.
func (m *Manager) GetAgent(ctx context.Context, name string) (*bgjobs.Agent, error) {
	if err := bgjobs.CheckAgentName("name", name); err != nil {
		return nil, err
	}
	a, err := m.tenants.GetAgent(ctx, name)
	if err != nil {
		return nil, err
	}
	if a == nil {
		return nil, bgjobs.Errorf(bgjobs.ENotFound, "no agent %s", name)
	}
	return a, nil
}

// Agents lists the agents that have jobs, for operators' views.
func (m *Manager) Agents(ctx context.Context) ([]string, error) { return m.store.AgentsWithJobs(ctx) }

// CreateKey makes a new key for agent, stores its digest and returns the
// key: the only time it is ever shown.
func (m *Manager) CreateKey(ctx context.Context, agent string) (string, error) {
	if err := bgjobs.CheckAgentName("agent", agent); err != nil {
		return "", err
	}
	var b [24]byte
	_, _ = rand.Read(b[:])
	key := "bgj_" + hex.EncodeToString(b[:])
	if err := m.tenants.StoreKey(ctx, agent, key); err != nil {
		return "", err
	}
	return key, nil
}

// RevokeKeys removes every stored key of agent and reports how many.
func (m *Manager) RevokeKeys(ctx context.Context, agent string) (int, error) {
	return m.tenants.RevokeKeys(ctx, agent)
}

// AgentOfKey returns the agent a stored key belongs to, or "", by the
// key's SHA-256 digest (hex): what is stored, never the key.
func (m *Manager) AgentOfKey(ctx context.Context, digest string) (string, error) {
	return m.tenants.AgentOfKey(ctx, digest)
}

// SignIn is a console sign-in (see OpenSignIn).
type SignIn = tenants.SignIn

// signInTTL is how long a console sign-in lasts.
const signInTTL = 7 * 24 * time.Hour

// OpenSignIn records a console sign-in made with a valid key and returns
// its token, which the browser keeps in place of the key: stored as a
// digest, ended by CloseSignIn or after SignInTTL; the caller checks that
// its key is still valid each time it is used.
func (m *Manager) OpenSignIn(ctx context.Context, in SignIn) (token string, err error) {
	var b [32]byte
	_, _ = rand.Read(b[:])
	token = "bgs_" + hex.EncodeToString(b[:])
	return token, m.tenants.OpenSignIn(ctx, token, in, signInTTL)
}

// SignInTTL is how long a console sign-in lasts.
func (m *Manager) SignInTTL() time.Duration { return signInTTL }

// SignInOf returns token's sign-in; false if there is none.
func (m *Manager) SignInOf(ctx context.Context, token string) (SignIn, bool, error) {
	return m.tenants.SignInOf(ctx, token)
}

// CloseSignIn ends token's sign-in.
func (m *Manager) CloseSignIn(ctx context.Context, token string) error {
	return m.tenants.CloseSignIn(ctx, token)
}

// StoredKeyCount is how many keys are stored; a server with any requires
// keys even when none are configured in its environment.
func (m *Manager) StoredKeyCount(ctx context.Context) (int64, error) {
	return m.tenants.KeyCount(ctx)
}

package agents

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2aclient"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/internal/netguard"
)

// SignatureHeader carries a webhook body's HMAC-SHA256, as "sha256=<hex>".
// It covers the body alone, so a receiver cannot tell a replay from the
// first delivery: TimedSignatureHeader can. Kept for receivers written
// against it.
const SignatureHeader = "X-Bgjobs-Signature"

// TimedSignatureHeader carries "t=<unix seconds>,v1=<hex>", where v1 is the
// HMAC-SHA256 under the webhook secret of "<t>.<raw body>". A receiver
// recomputes it, compares in constant time, and refuses a t too far from
// its clock (five minutes is usual): a replayed request carries an old t
// it cannot change without the secret.
const TimedSignatureHeader = "X-Bgjobs-Webhook-Signature"

// SignTimed returns the TimedSignatureHeader value of body sent at t.
func SignTimed(secret string, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(ts + "."))
	mac.Write(body)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac.Sum(nil))
}

// MessageIDHeader carries a webhook resume's message id, the same as the
// A2A resume's messageId. Delivery is at least once (a worker killed after
// the receiver took the body but before it recorded that sends it again),
// so a receiver drops a repeat of an id it already took.
const MessageIDHeader = "X-Bgjobs-Message-Id"

// Sign returns the SignatureHeader value of body under secret.
func Sign(secret string, body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// webhookTimeout bounds one webhook delivery; asynq retries a slow one.
const webhookTimeout = 10 * time.Second

// SendResume wakes the agent's session: A2A message/send with contextId =
// the session, or a signed webhook POST, as the agent is configured.
func (r *A2A) SendResume(ctx context.Context, a *bgjobs.Agent, session, messageID string, meta bgjobs.ResumeMeta) error {
	switch a.Resume {
	case bgjobs.ResumeA2A:
		return r.sendA2AResume(ctx, a.A2AURL, session, messageID, meta)
	case bgjobs.ResumeWebhook:
		return r.sendWebhook(ctx, a.WebhookURL, a.WebhookSecret, session, messageID, meta)
	}
	return nil
}

// ResumeText is the one text part of an A2A resume: it tells the agent what
// to do, and nothing of the results themselves.
func ResumeText(meta bgjobs.ResumeMeta) string {
	what := fmt.Sprintf("%d background job(s) finished", len(meta.Jobs))
	if meta.BatchID != nil && meta.Trigger == *meta.BatchID {
		what = fmt.Sprintf("Background batch %s joined", *meta.BatchID)
		if meta.Partial {
			what = fmt.Sprintf("Background batch %s joined partially (straggler timeout)", *meta.BatchID)
		}
	}
	c := meta.Counts
	return fmt.Sprintf("%s: %d completed, %d failed, %d cancelled. Drain your background notifications now to read the results.",
		what, c.Completed, c.Failed, c.Cancelled)
}

func metaMap(meta bgjobs.ResumeMeta) (map[string]any, error) {
	b, err := json.Marshal(meta)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	return m, json.Unmarshal(b, &m)
}

func (r *A2A) sendA2AResume(ctx context.Context, url, session, messageID string, meta bgjobs.ResumeMeta) error {
	// Not blocking: the agent runs a whole turn on this nudge; bgjobs only
	// needs it accepted.
	client, err := a2aclient.NewFromEndpoints(ctx,
		[]a2a.AgentInterface{{URL: url, Transport: a2a.TransportProtocolJSONRPC}},
		a2aclient.WithJSONRPCTransport(r.HTTP), a2aclient.WithConfig(a2aclient.Config{Polling: true}))
	if err != nil {
		return fmt.Errorf("a2a client for %s: %w", url, err)
	}
	defer client.Destroy()
	md, err := metaMap(meta)
	if err != nil {
		return err
	}
	msg := &a2a.Message{ID: messageID, ContextID: session, Role: a2a.MessageRoleUser,
		Parts: a2a.ContentParts{a2a.TextPart{Text: ResumeText(meta)}}, Metadata: md}
	if _, err := client.SendMessage(ctx, &a2a.MessageSendParams{Message: msg, Metadata: md}); err != nil {
		return netguard.Brief(fmt.Errorf("a2a resume message/send: %w", err))
	}
	return nil
}

// webhookBody is a webhook resume's body: the resume's object plus
// "session", encoded once (not through metaMap's map).
func webhookBody(session string, meta bgjobs.ResumeMeta) ([]byte, error) {
	return json.Marshal(struct {
		bgjobs.ResumeMeta
		Session string `json:"session"`
	}{meta, session})
}

func (r *A2A) sendWebhook(ctx context.Context, url, secret, session, messageID string, meta bgjobs.ResumeMeta) error {
	body, err := webhookBody(session, meta)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, webhookTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(SignatureHeader, Sign(secret, body))
	req.Header.Set(TimedSignatureHeader, SignTimed(secret, time.Now(), body))
	req.Header.Set(MessageIDHeader, messageID)
	resp, err := r.HTTP.Do(req)
	if err != nil {
		return netguard.Brief(fmt.Errorf("webhook: %w", err))
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		// The status code only: a reason phrase is the receiver's text.
		return fmt.Errorf("webhook answered %d %s", resp.StatusCode, http.StatusText(resp.StatusCode))
	}
	return nil
}

// Package client is a small Go client of the bgjobs HTTP API, for Go agents:
// spawn background work, drain its notifications at each turn, hold nudges
// while busy, and recall reports.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Client calls one bgjobs server.
type Client struct {
	// BaseURL is the server, e.g. http://127.0.0.1:8080.
	BaseURL string
	// Key is the agent's key (Authorization: Bearer). Empty in open mode.
	Key string
	// ActAs names the agent an admin key acts for (X-Bgjobs-Agent).
	ActAs string
	// HTTP defaults to a client with a 2-minute timeout.
	HTTP *http.Client
}

// New returns a client for baseURL with key.
func New(baseURL, key string) *Client {
	return &Client{BaseURL: strings.TrimRight(baseURL, "/"), Key: key, HTTP: &http.Client{Timeout: 2 * time.Minute}}
}

// Error is an error answer of the API.
type Error struct {
	Status int `json:"-"`
	// RetryAfter is how long the server asks a caller to wait before
	// trying again (its Retry-After header on a 503 or 429); 0 when it
	// named none.
	RetryAfter time.Duration `json:"-"`
	Code       string        `json:"code"`
	Message    string        `json:"message"`
	Field      string        `json:"field,omitempty"`
}

// The API's error codes, for errors.Is: errors.Is(err, client.ErrNotFound).
var (
	ErrInvalid         = &Error{Code: "invalid_argument"}
	ErrUnauthenticated = &Error{Code: "unauthenticated"}
	ErrNotFound        = &Error{Code: "not_found"}
	// ErrMethodNotAllowed: the path exists, not with that method (a client
	// older or newer than the server).
	ErrMethodNotAllowed = &Error{Code: "method_not_allowed"}
	ErrConflict         = &Error{Code: "conflict"}
	ErrTooLarge         = &Error{Code: "too_large"}
	ErrRateLimited      = &Error{Code: "rate_limited"}
	ErrUnavailable      = &Error{Code: "unavailable"}
)

// Is matches an error of the same code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// Temporary reports whether the same call may succeed later (503, 429):
// retry it, with the same Idempotency-Key where it takes one.
func (e *Error) Temporary() bool { return e.Code == "unavailable" || e.Code == "rate_limited" }

func (e *Error) Error() string {
	if e.Field != "" {
		return fmt.Sprintf("bgjobs: %d %s: %s (field %s)", e.Status, e.Code, e.Message, e.Field)
	}
	return fmt.Sprintf("bgjobs: %d %s: %s", e.Status, e.Code, e.Message)
}

// Work selects a work kind and its arguments.
type Work struct {
	Type string `json:"type"`
	Args any    `json:"args,omitempty"`
}

// SpawnRequest asks for one job.
type SpawnRequest struct {
	// OriginSession is required for Spawn; Batch sets it for every job.
	OriginSession string `json:"origin_session,omitempty"`
	Kind          string `json:"kind,omitempty"`
	SubagentType  string `json:"subagent_type,omitempty"`
	Description   string `json:"description,omitempty"`
	Prompt        string `json:"prompt,omitempty"`
	Work          *Work  `json:"work,omitempty"`
	Incognito     bool   `json:"incognito,omitempty"`
	// WaitMS, up to 120000, waits for the job: if it ends in time the
	// answer carries its whole row and it is not notified again.
	WaitMS int `json:"wait_ms,omitempty"`
	// TurnID joins the jobs of one turn of the session into one briefing
	// (a batch, sealed when the session goes idle or shortly after the
	// turn's last spawn).
	TurnID string `json:"turn_id,omitempty"`
	// StartInS, up to 2592000 (30 days), starts the job that many seconds
	// from now instead of at once (Spawn only: a batch's jobs start
	// together). Not with WaitMS or TurnID.
	StartInS int `json:"start_in_s,omitempty"`
	// TimeoutS bounds the job's run to that many seconds (at most the
	// server's BGJOBS_TURN_TIMEOUT); past it the job ends failed. Zero
	// leaves it at the server's limit.
	TimeoutS int `json:"timeout_s,omitempty"`
	// IdempotencyKey, when set, returns the first job for a repeat.
	IdempotencyKey string `json:"-"`
}

// Spawned is the answer to a spawn.
type Spawned struct {
	ID      string  `json:"id"`
	Status  string  `json:"status"`
	BatchID *string `json:"batch_id"`
	Message string  `json:"message"`
	// Result and Error are set when a WaitMS spawn ended within its wait.
	Result *string `json:"result,omitempty"`
	Error  *string `json:"error,omitempty"`
}

// Job is a job row.
type Job struct {
	ID            string    `json:"id"`
	Agent         string    `json:"agent"`
	OriginSession string    `json:"origin_session"`
	Kind          string    `json:"kind"`
	SubagentType  string    `json:"subagent_type,omitempty"`
	Description   string    `json:"description"`
	Status        string    `json:"status"`
	Result        *string   `json:"result"`
	Error         *string   `json:"error"`
	Notified      bool      `json:"notified"`
	BatchID       *string   `json:"batch_id"`
	Incognito     bool      `json:"incognito"`
	Attempts      int       `json:"attempts"`
	ReportIndexed bool      `json:"report_indexed"`
	CreatedAt     time.Time `json:"created_at"`
	// RunAt is set for a job spawned with StartInS: when it starts
	// (within a few seconds).
	RunAt *time.Time `json:"run_at,omitempty"`
	// TimeoutS is the job's own bound on its run, when its spawn set one.
	TimeoutS    int        `json:"timeout_s,omitempty"`
	StartedAt   *time.Time `json:"started_at"`
	CompletedAt *time.Time `json:"completed_at"`
}

// Notification is one result handed over by a drain.
type Notification struct {
	JobID       string  `json:"job_id"`
	Status      string  `json:"status"`
	Description string  `json:"description"`
	BatchID     *string `json:"batch_id"`
	Truncated   bool    `json:"truncated"`
	Text        string  `json:"text"`
}

// BatchResult is what a fan-out spawned and skipped.
type BatchResult struct {
	BatchID string `json:"batch_id"`
	Jobs    []struct {
		Index int    `json:"index"`
		ID    string `json:"id"`
	} `json:"jobs"`
	Skipped []struct {
		Index int   `json:"index"`
		Error Error `json:"error"`
	} `json:"skipped"`
}

// Hit is one recall result.
type Hit struct {
	DocID      string    `json:"doc_id"`
	JobID      string    `json:"job_id"`
	Session    string    `json:"session"`
	SourceType string    `json:"source_type"`
	Heading    string    `json:"heading"`
	Snippet    string    `json:"snippet"`
	Score      float64   `json:"score"`
	TrustTier  int       `json:"trust_tier"`
	CreatedAt  time.Time `json:"created_at"`
}

func (c *Client) do(ctx context.Context, method, path string, body any, out any, hdr ...string) error {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.BaseURL+path, r)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	c.authorize(req)
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i+1] != "" {
			req.Header.Set(hdr[i], hdr[i+1])
		}
	}
	resp, err := c.httpClient().Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode >= 300 {
		return apiError(resp, raw)
	}
	if out == nil || len(raw) == 0 {
		return nil
	}
	return json.Unmarshal(raw, out)
}

func (c *Client) authorize(req *http.Request) {
	if c.Key != "" {
		req.Header.Set("Authorization", "Bearer "+c.Key)
	}
	if c.ActAs != "" {
		req.Header.Set("X-Bgjobs-Agent", c.ActAs)
	}
}

func (c *Client) httpClient() *http.Client {
	if c.HTTP == nil {
		return http.DefaultClient
	}
	return c.HTTP
}

// apiError reads an error answer.
func apiError(resp *http.Response, raw []byte) *Error {
	var e struct {
		Error Error `json:"error"`
	}
	if json.Unmarshal(raw, &e) != nil || e.Error.Code == "" {
		e.Error = Error{Code: "unknown", Message: strings.TrimSpace(string(raw))}
	}
	e.Error.Status = resp.StatusCode
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
		e.Error.RetryAfter = time.Duration(s) * time.Second
	}
	return &e.Error
}

// Spawn starts a job. Trust the notification: do not poll it.
func (c *Client) Spawn(ctx context.Context, r SpawnRequest) (*Spawned, error) {
	var out Spawned
	return &out, c.do(ctx, http.MethodPost, "/v1/jobs", r, &out, "Idempotency-Key", r.IdempotencyKey)
}

// Batch fans out jobs of one session as one batch.
func (c *Client) Batch(ctx context.Context, session string, jobs []SpawnRequest) (*BatchResult, error) {
	var out BatchResult
	return &out, c.do(ctx, http.MethodPost, "/v1/batches", map[string]any{"origin_session": session, "jobs": jobs}, &out)
}

// Batch is a fan-out and its join state.
type Batch struct {
	ID            string         `json:"batch_id"`
	OriginSession string         `json:"origin_session"`
	Size          int            `json:"size"`
	Settled       int            `json:"settled"`
	Counts        map[string]int `json:"counts"`
	Joined        bool           `json:"joined"`
	Partial       bool           `json:"partial"`
	Jobs          []string       `json:"jobs"`
}

// GetBatch reads a batch.
func (c *Client) GetBatch(ctx context.Context, id string) (*Batch, error) {
	var out Batch
	return &out, c.do(ctx, http.MethodGet, "/v1/batches/"+url.PathEscape(id), nil, &out)
}

// CancelBatch cancels every member of a batch that has not ended (and
// what their turns spawned); it returns the batch after, and how many
// members this call cancelled.
func (c *Client) CancelBatch(ctx context.Context, id string) (*Batch, int, error) {
	var out struct {
		Batch
		Cancelled int `json:"cancelled"`
	}
	err := c.do(ctx, http.MethodPost, "/v1/batches/"+url.PathEscape(id)+"/cancel", nil, &out)
	return &out.Batch, out.Cancelled, err
}

// GetAgent reads an agent's configuration (its webhook secret redacted).
func (c *Client) GetAgent(ctx context.Context, name string) (*AgentConfig, error) {
	var out AgentConfig
	return &out, c.do(ctx, http.MethodGet, "/v1/agents/"+url.PathEscape(name), nil, &out)
}

// Get reads a job.
func (c *Client) Get(ctx context.Context, id string) (*Job, error) {
	var out Job
	return &out, c.do(ctx, http.MethodGet, "/v1/jobs/"+url.PathEscape(id), nil, &out)
}

// Cancel stops a job, and the jobs its own turn spawned.
func (c *Client) Cancel(ctx context.Context, id string) (*Job, error) {
	var out Job
	return &out, c.do(ctx, http.MethodPost, "/v1/jobs/"+url.PathEscape(id)+"/cancel", nil, &out)
}

// Retry runs an ended job again, the same id, a new attempt; force runs a
// completed one again too (else a conflict). Its new outcome is drained
// once more.
func (c *Client) Retry(ctx context.Context, id string, force bool) (*Job, error) {
	var out Job
	return &out, c.do(ctx, http.MethodPost, "/v1/jobs/"+url.PathEscape(id)+"/retry", map[string]bool{"force": force}, &out)
}

// Ack marks a result consumed another way; it reports whether this call did.
func (c *Client) Ack(ctx context.Context, id string) (bool, error) {
	var out struct {
		Acked bool `json:"acked"`
	}
	return out.Acked, c.do(ctx, http.MethodPost, "/v1/jobs/"+url.PathEscape(id)+"/ack", nil, &out)
}

// List returns a page of the session's jobs (all sessions when empty).
func (c *Client) List(ctx context.Context, session, status string, limit int, cursor string) ([]Job, string, error) {
	q := url.Values{}
	for k, v := range map[string]string{"session": session, "status": status, "cursor": cursor} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out struct {
		Jobs       []Job   `json:"jobs"`
		NextCursor *string `json:"next_cursor"`
	}
	if err := c.do(ctx, http.MethodGet, "/v1/jobs?"+q.Encode(), nil, &out); err != nil {
		return nil, "", err
	}
	next := ""
	if out.NextCursor != nil {
		next = *out.NextCursor
	}
	return out.Jobs, next, nil
}

// Drain hands over every ended, unnotified job of the session, once,
// page after page. Pass the same idemKey when retrying a drain whose
// answer was lost (each page uses it with its number).
func (c *Client) Drain(ctx context.Context, session, idemKey string) ([]Notification, error) {
	var all []Notification
	for page := 0; ; page++ {
		key := idemKey
		if key != "" && page > 0 {
			key += "#" + strconv.Itoa(page)
		}
		var out struct {
			Notifications []Notification `json:"notifications"`
			More          bool           `json:"more"`
		}
		if err := c.do(ctx, http.MethodPost, "/v1/sessions/"+session+"/drain", nil, &out, "Idempotency-Key", key); err != nil {
			return all, err
		}
		all = append(all, out.Notifications...)
		if !out.More || len(out.Notifications) == 0 {
			return all, nil
		}
	}
}

// Delete removes an ended job.
func (c *Client) Delete(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/v1/jobs/"+url.PathEscape(id), nil, nil)
}

// Remember indexes text in the agent's memory at once (searchable when it
// returns), under title, for session.
func (c *Client) Remember(ctx context.Context, session, title, text string) (docID string, err error) {
	var out struct {
		DocID string `json:"doc_id"`
	}
	err = c.do(ctx, http.MethodPost, "/v1/knowledge", map[string]string{"session": session, "title": title, "text": text}, &out)
	return out.DocID, err
}

// Text is one text of RememberAll.
type Text struct {
	Title string `json:"title,omitempty"`
	Text  string `json:"text"`
}

// RememberAll indexes up to 100 texts in one request (searchable when it
// returns) and returns their document ids in order: the way to index many
// texts, which then share the index's batches.
func (c *Client) RememberAll(ctx context.Context, session string, texts []Text) (docIDs []string, err error) {
	var out struct {
		DocIDs []string `json:"doc_ids"`
	}
	err = c.do(ctx, http.MethodPost, "/v1/knowledge", map[string]any{"session": session, "documents": texts}, &out)
	return out.DocIDs, err
}

// Ingest fetches url into the agent's memory as a background job.
func (c *Client) Ingest(ctx context.Context, session, pageURL string) (*Spawned, error) {
	var out Spawned
	return &out, c.do(ctx, http.MethodPost, "/v1/knowledge", map[string]string{"session": session, "url": pageURL}, &out)
}

// Busy holds resumes for the session for ttl (a turn is running).
func (c *Client) Busy(ctx context.Context, session string, ttl time.Duration) error {
	return c.do(ctx, http.MethodPost, "/v1/sessions/"+session+"/busy", map[string]int{"ttl_s": int(ttl.Seconds())}, nil)
}

// Idle ends the busy lease; one coalesced resume follows if anything waits.
func (c *Client) Idle(ctx context.Context, session string) error {
	return c.do(ctx, http.MethodPost, "/v1/sessions/"+session+"/idle", nil, nil)
}

// Recall searches the agent's reports and documents.
func (c *Client) Recall(ctx context.Context, query, session string, limit int) ([]Hit, int, error) {
	q := url.Values{"q": {query}}
	if session != "" {
		q.Set("session", session)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out struct {
		Total int   `json:"total"`
		Hits  []Hit `json:"hits"`
	}
	err := c.do(ctx, http.MethodGet, "/v1/recall?"+q.Encode(), nil, &out)
	return out.Hits, out.Total, err
}

// AgentConfig is where bgjobs reaches an agent.
type AgentConfig struct {
	A2AURL        string            `json:"a2a_url,omitempty"`
	Resume        string            `json:"resume,omitempty"`
	WebhookURL    string            `json:"webhook_url,omitempty"`
	WebhookSecret string            `json:"webhook_secret,omitempty"`
	AutoResume    *bool             `json:"auto_resume,omitempty"`
	SubagentTypes map[string]string `json:"subagent_types,omitempty"`
}

// PutAgent registers an agent.
func (c *Client) PutAgent(ctx context.Context, name string, a AgentConfig) error {
	return c.do(ctx, http.MethodPut, "/v1/agents/"+url.PathEscape(name), a, nil)
}

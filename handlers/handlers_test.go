package handlers

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynqmon"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/client"
	"github.com/bgjobs/bgjobs/internal/redisconn"
	"github.com/bgjobs/bgjobs/internal/testenv"
	"github.com/bgjobs/bgjobs/tasks"
)

type testBundle struct {
	srv *httptest.Server
	m   *tasks.Manager
	cfg bgjobs.Config
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	env := testenv.New(t)
	cfg := bgjobs.Config{Namespace: env.Namespace, APIKeys: map[string]string{"key-a": "alpha"}, AgentAllow: []string{"127.0.0.1"}}.WithDefaults()
	m := tasks.NewManager(env.RDB, cfg, tasks.Deps{Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(func() { _ = m.Close() })
	srv := httptest.NewServer(NewServer(cfg, Deps{Manager: m, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}))
	t.Cleanup(srv.Close)
	return &testBundle{srv: srv, m: m, cfg: cfg}
}

func (b *testBundle) do(t *testing.T, method, path, body string, hdr map[string]string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, b.srv.URL+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer key-a")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if len(raw) > 0 {
		require.NoError(t, json.Unmarshal(raw, &out), "not JSON: %s", raw)
	}
	return resp.StatusCode, out
}

// Every kind of bad input gets its documented 4xx code and a JSON error
// naming what is wrong; none is a 500.
func TestBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	job := b.spawnEcho(t)
	echo := `"kind":"work","description":"d","work":{"type":"echo","args":{"text":"x"}}`
	for _, tc := range []struct {
		desc       string
		method     string
		path       string
		body       string
		hdr        map[string]string
		wantStatus int
		wantCode   string
		wantField  string
		wantMsg    string
	}{
		{desc: "malformed JSON", method: "POST", path: "/v1/jobs", body: `{"origin_session":`, wantStatus: 400, wantCode: "invalid_argument"},
		{desc: "not an object", method: "POST", path: "/v1/jobs", body: `[1,2]`, wantStatus: 400, wantCode: "invalid_argument"},
		{desc: "empty body", method: "POST", path: "/v1/jobs", body: ``, wantStatus: 400, wantCode: "invalid_argument"},
		{desc: "trailing data", method: "POST", path: "/v1/jobs", body: `{"origin_session":"s",` + echo + `} {}`, wantStatus: 400, wantCode: "invalid_argument"},
		{desc: "unknown field", method: "POST", path: "/v1/jobs", body: `{"origin_session":"s","colour":"red",` + echo + `}`, wantStatus: 400, wantCode: "invalid_argument", wantField: "colour"},
		{desc: "missing session", method: "POST", path: "/v1/jobs", body: `{` + echo + `}`, wantStatus: 400, wantCode: "invalid_argument", wantField: "origin_session"},
		{desc: "bad session id", method: "POST", path: "/v1/jobs", body: `{"origin_session":"chat 42!",` + echo + `}`, wantStatus: 400, wantCode: "invalid_argument", wantField: "origin_session"},
		{desc: "session too long", method: "POST", path: "/v1/jobs", body: `{"origin_session":"` + strings.Repeat("s", 201) + `",` + echo + `}`, wantStatus: 400, wantCode: "invalid_argument", wantField: "origin_session"},
		{desc: "session wrong type", method: "POST", path: "/v1/jobs", body: `{"origin_session":42,` + echo + `}`, wantStatus: 400, wantCode: "invalid_argument", wantField: "origin_session"},
		{desc: "incognito wrong type", method: "POST", path: "/v1/jobs", body: `{"origin_session":"s","incognito":"yes",` + echo + `}`, wantStatus: 400, wantCode: "invalid_argument", wantField: "incognito"},
		{desc: "unknown kind", method: "POST", path: "/v1/jobs", body: `{"origin_session":"s","kind":"magic","prompt":"p"}`, wantStatus: 400, wantCode: "invalid_argument", wantField: "kind"},
		{desc: "turn without prompt", method: "POST", path: "/v1/jobs", body: `{"origin_session":"s","kind":"turn"}`, wantStatus: 400, wantCode: "invalid_argument", wantField: "prompt"},
		{desc: "turn for an agent with no a2a_url", method: "POST", path: "/v1/jobs", body: `{"origin_session":"s","prompt":"p"}`, wantStatus: 400, wantCode: "invalid_argument", wantField: "agent"},
		{desc: "oversize prompt", method: "POST", path: "/v1/jobs", body: `{"origin_session":"s","prompt":"` + strings.Repeat("p", bgjobs.MaxPromptBytes+1) + `"}`, wantStatus: 413, wantCode: "too_large", wantField: "prompt"},
		{desc: "oversize body", method: "POST", path: "/v1/jobs", body: `{"origin_session":"s","prompt":"` + strings.Repeat("p", bgjobs.MaxBodyBytes) + `"}`, wantStatus: 413, wantCode: "too_large"},
		{desc: "description too long", method: "POST", path: "/v1/jobs", body: `{"origin_session":"s","kind":"work","description":"` + strings.Repeat("d", 501) + `","work":{"type":"echo"}}`, wantStatus: 400, wantCode: "invalid_argument", wantField: "description"},
		{desc: "unknown work kind", method: "POST", path: "/v1/jobs", body: `{"origin_session":"s","kind":"work","work":{"type":"teleport"}}`, wantStatus: 400, wantCode: "invalid_argument", wantField: "work.type"},
		{desc: "work without type", method: "POST", path: "/v1/jobs", body: `{"origin_session":"s","kind":"work"}`, wantStatus: 400, wantCode: "invalid_argument", wantField: "work.type"},
		{desc: "echo args wrong type", method: "POST", path: "/v1/jobs", body: `{"origin_session":"s","kind":"work","work":{"type":"echo","args":{"delay_ms":"soon"}}}`, wantStatus: 400, wantCode: "invalid_argument", wantField: "work.args.delay_ms"},
		{desc: "echo args unknown", method: "POST", path: "/v1/jobs", body: `{"origin_session":"s","kind":"work","work":{"type":"echo","args":{"shout":true}}}`, wantStatus: 400, wantCode: "invalid_argument", wantField: "work.args.shout"},
		{desc: "echo args not an object", method: "POST", path: "/v1/jobs", body: `{"origin_session":"s","kind":"work","work":{"type":"echo","args":[1]}}`, wantStatus: 400, wantCode: "invalid_argument", wantField: "work.args", wantMsg: "want a JSON object, got array"},
		{desc: "echo args exponent", method: "POST", path: "/v1/jobs", body: `{"origin_session":"s","kind":"work","work":{"type":"echo","args":{"delay_ms":1e3}}}`, wantStatus: 400, wantCode: "invalid_argument", wantField: "work.args.delay_ms", wantMsg: "without a fraction or exponent"},
		{desc: "echo args text a number", method: "POST", path: "/v1/jobs", body: `{"origin_session":"s","kind":"work","work":{"type":"echo","args":{"text":5}}}`, wantStatus: 400, wantCode: "invalid_argument", wantField: "work.args.text", wantMsg: "want a string, got number"},
		{desc: "batch member args", method: "POST", path: "/v1/batches", body: `{"origin_session":"s","jobs":[{"kind":"work","work":{"type":"echo","args":{"fail":"yes"}}}]}`, wantStatus: 400, wantCode: "invalid_argument", wantField: "jobs[0].work.args.fail", wantMsg: "want true or false"},
		{desc: "malformed query escape", method: "GET", path: "/v1/jobs?limit=%zz", wantStatus: 400, wantCode: "invalid_argument", wantMsg: "malformed query string"},
		{desc: "query with semicolons", method: "GET", path: "/v1/jobs?status=queued;limit=1", wantStatus: 400, wantCode: "invalid_argument", wantMsg: "malformed query string"},
		{desc: "malformed drain query", method: "POST", path: "/v1/sessions/s/drain?limit=%", wantStatus: 400, wantCode: "invalid_argument", wantMsg: "malformed query string"},
		{desc: "echo negative delay", method: "POST", path: "/v1/jobs", body: `{"origin_session":"s","kind":"work","work":{"type":"echo","args":{"delay_ms":-1}}}`, wantStatus: 400, wantCode: "invalid_argument", wantField: "work.args.delay_ms"},
		{desc: "malformed job id", method: "GET", path: "/v1/jobs/not-an-id", wantStatus: 400, wantCode: "invalid_argument", wantField: "id"},
		{desc: "malformed job id on cancel", method: "POST", path: "/v1/jobs/bg-XYZ/cancel", wantStatus: 400, wantCode: "invalid_argument", wantField: "id"},
		{desc: "unknown job id", method: "GET", path: "/v1/jobs/bg-000000000000", wantStatus: 404, wantCode: "not_found"},
		{desc: "ack of a running job", method: "POST", path: "/v1/jobs/" + job + "/ack", wantStatus: 409, wantCode: "conflict"},
		{desc: "delete of a queued job", method: "DELETE", path: "/v1/jobs/" + job, wantStatus: 409, wantCode: "conflict"},
		{desc: "bad list limit", method: "GET", path: "/v1/jobs?limit=lots", wantStatus: 400, wantCode: "invalid_argument", wantField: "limit"},
		{desc: "list limit too high", method: "GET", path: "/v1/jobs?limit=100000", wantStatus: 400, wantCode: "invalid_argument", wantField: "limit"},
		{desc: "bad list status", method: "GET", path: "/v1/jobs?status=sleeping", wantStatus: 400, wantCode: "invalid_argument", wantField: "status"},
		{desc: "bad cursor", method: "GET", path: "/v1/jobs?cursor=bm90LWEtY3Vyc29y", wantStatus: 400, wantCode: "invalid_argument", wantField: "cursor"},
		{desc: "bad drain session", method: "POST", path: "/v1/sessions/bad%20id/drain", wantStatus: 400, wantCode: "invalid_argument", wantField: "session"},
		{desc: "unknown session action", method: "POST", path: "/v1/sessions/chat-1/explode", wantStatus: 404, wantCode: "not_found"},
		{desc: "bad agent name", method: "PUT", path: "/v1/agents/Alpha!", body: `{}`, wantStatus: 400, wantCode: "invalid_argument", wantField: "name"},
		{desc: "agent bad resume", method: "PUT", path: "/v1/agents/alpha", body: `{"resume":"smoke-signal"}`, wantStatus: 400, wantCode: "invalid_argument", wantField: "resume"},
		{desc: "agent bad url", method: "PUT", path: "/v1/agents/alpha", body: `{"a2a_url":"ftp://x"}`, wantStatus: 400, wantCode: "invalid_argument", wantField: "a2a_url"},
		{desc: "agent roster wrong type", method: "PUT", path: "/v1/agents/alpha", body: `{"subagent_types":["a"]}`, wantStatus: 400, wantCode: "invalid_argument", wantField: "subagent_types"},
		{desc: "unknown agent", method: "GET", path: "/v1/agents/alpha", wantStatus: 404, wantCode: "not_found"},
		{desc: "unknown route", method: "GET", path: "/v1/nothing", wantStatus: 404, wantCode: "not_found"},
		{desc: "no key", method: "GET", path: "/v1/jobs", hdr: map[string]string{"Authorization": ""}, wantStatus: 401, wantCode: "unauthenticated"},
		{desc: "not bearer", method: "GET", path: "/v1/jobs", hdr: map[string]string{"Authorization": "Basic a2V5LWE="}, wantStatus: 401, wantCode: "unauthenticated"},
		{desc: "a valid key with no scheme", method: "GET", path: "/v1/jobs", hdr: map[string]string{"Authorization": "key-a"}, wantStatus: 401, wantCode: "unauthenticated"},
		{desc: "wait_ms past int64 milliseconds", method: "POST", path: "/v1/jobs", body: `{"origin_session":"s","wait_ms":18446744073710,` + echo + `}`, wantStatus: 400, wantCode: "invalid_argument", wantField: "wait_ms"},
		{desc: "delay_ms that would wrap", method: "POST", path: "/v1/jobs", body: `{"origin_session":"s","kind":"work","work":{"type":"echo","args":{"delay_ms":9223372036855}}}`, wantStatus: 400, wantCode: "invalid_argument", wantField: "work.args.delay_ms"},
		{desc: "ttl_s that would wrap", method: "POST", path: "/v1/sessions/s/busy", body: `{"ttl_s":18446747674}`, wantStatus: 400, wantCode: "invalid_argument", wantField: "ttl_s"},
		{desc: "ttl_s past the cap", method: "POST", path: "/v1/sessions/s/busy", body: `{"ttl_s":86401}`, wantStatus: 400, wantCode: "invalid_argument", wantField: "ttl_s", wantMsg: "between 1 and 86400"},
		{desc: "ttl_s negative", method: "POST", path: "/v1/sessions/s/busy", body: `{"ttl_s":-5}`, wantStatus: 400, wantCode: "invalid_argument", wantField: "ttl_s", wantMsg: "between 1 and 86400"},
		{desc: "ttl_s zero", method: "POST", path: "/v1/sessions/s/busy", body: `{"ttl_s":0}`, wantStatus: 400, wantCode: "invalid_argument", wantField: "ttl_s", wantMsg: "between 1 and 86400"},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			code, body := b.do(t, tc.method, tc.path, tc.body, tc.hdr)
			require.Equal(t, tc.wantStatus, code, "%v", body)
			e, ok := body["error"].(map[string]any)
			require.True(t, ok, "an error body: %v", body)
			require.Equal(t, tc.wantCode, e["code"])
			require.NotEmpty(t, e["message"])
			// The caller's words, never Go's: no decoder prefix, no type names.
			require.NotRegexp(t, `json: |Go (struct|value)|[a-z]+\.[A-Z]\w+`, e["message"])
			if tc.wantField != "" {
				require.Equal(t, tc.wantField, e["field"], "%v", e["message"])
			}
			if tc.wantMsg != "" {
				require.Contains(t, e["message"], tc.wantMsg)
			}
		})
	}
}

// A real path asked with a method it does not take answers 405 with the
// methods it does in Allow, as an HTTP client expects; under /v1 only once
// the caller is known. A path that does not exist stays 404.
func TestWrongMethod(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, tc := range []struct {
		method, path, auth  string
		wantStatus          int
		wantCode, wantAllow string
	}{
		{"PUT", "/v1/jobs", "Bearer key-a", 405, "method_not_allowed", "OPTIONS, GET, POST"},
		{"POST", "/v1/jobs/bg-000000000000", "Bearer key-a", 405, "method_not_allowed", "OPTIONS, DELETE, GET"},
		{"GET", "/v1/sessions/chat-1/drain", "Bearer key-a", 405, "method_not_allowed", "OPTIONS, POST"},
		{"DELETE", "/v1/agents/alpha", "Bearer key-a", 405, "method_not_allowed", "OPTIONS, GET, PUT"},
		{"POST", "/", "Bearer key-a", 405, "method_not_allowed", "OPTIONS, GET"},
		{"PUT", "/v1/jobs", "", 401, "unauthenticated", ""},
		{"PUT", "/v1/nothing", "Bearer key-a", 404, "not_found", ""},
		{"GET", "/nothing", "", 404, "not_found", ""},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, b.srv.URL+tc.path, nil)
			require.NoError(t, err)
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			var body struct {
				Error struct{ Code, Message string }
			}
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
			require.Equal(t, tc.wantStatus, resp.StatusCode, body.Error.Message)
			require.Equal(t, tc.wantCode, body.Error.Code)
			require.Equal(t, tc.wantAllow, resp.Header.Get("Allow"))
			if tc.wantAllow != "" {
				require.Contains(t, body.Error.Message, tc.method+" is not allowed here")
			}
			require.NotEmpty(t, resp.Header.Get("Content-Security-Policy"), "every response carries the security headers")
		})
	}
}

func (b *testBundle) spawnEcho(t *testing.T) string {
	t.Helper()
	j, _, err := b.m.Spawn(context.Background(), tasks.SpawnRequest{Agent: "alpha", OriginSession: "s", Kind: bgjobs.KindWork,
		Work: &bgjobs.WorkSpec{Type: "echo", Args: json.RawMessage(`{"delay_ms":60000}`)}})
	require.NoError(t, err)
	return j.ID
}

func TestSpawnIdempotencyKeyOverHTTP(t *testing.T) {
	t.Parallel()
	b := setup(t)
	body := `{"origin_session":"s","kind":"work","work":{"type":"echo"}}`
	code, first := b.do(t, "POST", "/v1/jobs", body, map[string]string{"Idempotency-Key": "abc"})
	require.Equal(t, http.StatusAccepted, code)
	code, again := b.do(t, "POST", "/v1/jobs", body, map[string]string{"Idempotency-Key": "abc"})
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, first["id"], again["id"])
	// The same request spelled differently is the same request.
	code, _ = b.do(t, "POST", "/v1/jobs", `{"kind":"work","work":{"type":"echo"},"origin_session":"s"}`, map[string]string{"Idempotency-Key": "abc"})
	require.Equal(t, http.StatusOK, code)
	// A different request under the same key is refused, naming the job.
	code, other := b.do(t, "POST", "/v1/jobs", `{"origin_session":"s","kind":"work","work":{"type":"echo","args":{"text":"other"}}}`,
		map[string]string{"Idempotency-Key": "abc"})
	require.Equal(t, http.StatusConflict, code, "%v", other)
	require.Contains(t, other["error"].(map[string]any)["message"], first["id"])
}

func TestSessionIDsWithSlashes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	code, body := b.do(t, "POST", "/v1/sessions/team/chat:42@x/drain", "", nil)
	require.Equal(t, http.StatusOK, code, "%v", body)
	require.Equal(t, []any{}, body["notifications"])
}

func TestAgentSecretsAreRedacted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	code, body := b.do(t, "PUT", "/v1/agents/alpha", `{"resume":"webhook","webhook_url":"http://127.0.0.1:1/hook","webhook_secret":"s3cret"}`, nil)
	require.Equal(t, http.StatusOK, code, "%v", body)
	code, body = b.do(t, "GET", "/v1/agents/alpha", "", nil)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "[redacted]", body["webhook_secret"])
	require.NotContains(t, body, "s3cret")
}

// A 503 says what could not be done and that a retry may work; the Redis
// address and its error stay in the log.
func TestUnavailableNamesNoInternals(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = rdb.Close() })
	cfg := bgjobs.Config{Namespace: "t-dead", APIKeys: map[string]string{"key-a": "alpha"}}.WithDefaults()
	m := tasks.NewManager(rdb, cfg, tasks.Deps{Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(func() { _ = m.Close() })
	srv := httptest.NewServer(NewServer(cfg, Deps{Manager: m, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}))
	t.Cleanup(srv.Close)
	b := &testBundle{srv: srv, m: m, cfg: cfg}
	// Every route that needs Redis: a 503 each, never a 500 (the event
	// stream's first reads once answered 500 with the dial error logged).
	id, spawn := "bg-000000000000", `{"origin_session":"s","kind":"work","work":{"type":"echo"}}`
	for _, r := range []struct{ method, path, body string }{
		{"GET", "/readyz", ""},
		{"GET", "/v1/jobs/" + id, ""},
		{"GET", "/v1/jobs", ""},
		{"POST", "/v1/jobs", spawn},
		{"POST", "/v1/jobs/" + id + "/cancel", ""},
		{"POST", "/v1/jobs/" + id + "/ack", ""},
		{"DELETE", "/v1/jobs/" + id, ""},
		{"POST", "/v1/batches", `{"origin_session":"s","jobs":[{"kind":"work","work":{"type":"echo"}}]}`},
		{"GET", "/v1/batches/bt-000000000000", ""},
		{"GET", "/v1/agents/alpha", ""},
		{"PUT", "/v1/agents/alpha", `{"resume":"none"}`},
		{"POST", "/v1/sessions/s/drain", ""},
		{"POST", "/v1/sessions/s/busy", `{"ttl_s":30}`},
		{"POST", "/v1/sessions/s/idle", ""},
		{"GET", "/v1/events", ""},
	} {
		what := r.method + " " + r.path
		code, body := b.do(t, r.method, r.path, r.body, nil)
		require.Equal(t, http.StatusServiceUnavailable, code, "%s: %v", what, body)
		e := body["error"].(map[string]any)
		require.Equal(t, "unavailable", e["code"], what)
		require.NotContains(t, e["message"], "127.0.0.1", what)
		require.NotContains(t, e["message"], "dial", what)
	}
	// The Go client sees a temporary error and how long to wait: the
	// answer's Retry-After.
	_, err := client.New(srv.URL, "key-a").Get(context.Background(), id)
	var ce *client.Error
	require.ErrorAs(t, err, &ce)
	require.True(t, ce.Temporary())
	require.Equal(t, time.Second, ce.RetryAfter)
}

// asynqmon's changes wake the workers: a job queued while its queue is
// paused runs as soon as the admin resumes the queue from the dashboard,
// not when the worker's held fetch gives up (a minute here).
func TestMonitoringWakesTheWorkers(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	ctx := context.Background()
	cfg := bgjobs.Config{Namespace: env.Namespace, AdminKey: "adm", FetchWait: time.Minute}.WithDefaults()
	m := tasks.NewManager(env.RDB, cfg, tasks.Deps{Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(func() { _ = m.Close() })
	w := m.NewWorker()
	require.NoError(t, w.Start(ctx))
	t.Cleanup(w.Shutdown)
	opt, err := redisconn.ConnOpt(env.URL)
	require.NoError(t, err)
	mon := asynqmon.New(asynqmon.Options{RootPath: "/monitoring", RedisConnOpt: opt})
	t.Cleanup(func() { _ = mon.Close() })
	srv := httptest.NewServer(NewServer(cfg, Deps{Manager: m, Monitoring: mon, Log: slog.New(slog.DiscardHandler)}))
	t.Cleanup(srv.Close)
	call := func(method, path, body string) (int, map[string]any) {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer adm")
		req.Header.Set("X-Bgjobs-Agent", "alpha")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var out map[string]any
		raw, _ := io.ReadAll(resp.Body)
		_ = json.Unmarshal(raw, &out)
		return resp.StatusCode, out
	}
	work := m.Queue("work")
	code, _ := call("POST", "/monitoring/api/queues/"+work+":pause", "")
	require.Equal(t, http.StatusNoContent, code)
	code, j := call("POST", "/v1/jobs", `{"origin_session":"s","kind":"work","description":"d","work":{"type":"echo","args":{"text":"x"}}}`)
	require.Equal(t, http.StatusAccepted, code)
	id := j["id"].(string)
	status := func() string {
		_, row := call("GET", "/v1/jobs/"+id, "")
		s, _ := row["status"].(string)
		return s
	}
	// Its enqueue woke a fetch, which found the queue paused and is held.
	time.Sleep(time.Second)
	require.Equal(t, "queued", status(), "the queue is paused")

	code, _ = call("POST", "/monitoring/api/queues/"+work+":resume", "")
	require.Equal(t, http.StatusNoContent, code)
	testenv.Eventually(t, 20*time.Second, "the job runs once its queue is resumed", func() bool { return status() == "completed" })
}

// TestBatchWithABadMemberOverHTTP: a batch decodes in one pass, but a member
// that does not decode is still skipped on its own, named by index and
// field, while the others spawn.
func TestBatchWithABadMemberOverHTTP(t *testing.T) {
	t.Parallel()
	b := setup(t)
	echo := `{"kind":"work","description":"d","work":{"type":"echo","args":{"text":"x"}}}`
	for _, tc := range []struct {
		desc      string
		members   string
		spawned   []float64
		skipped   float64
		wantField string
	}{
		{desc: "all good", members: echo + "," + echo, spawned: []float64{0, 1}},
		{desc: "an unknown field", members: echo + `,{"kind":"work","colour":"red"},` + echo, spawned: []float64{0, 2}, skipped: 1, wantField: "colour"},
		{desc: "a wrong type", members: `{"incognito":"yes"},` + echo, spawned: []float64{1}, skipped: 0, wantField: "incognito"},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			status, out := b.do(t, "POST", "/v1/batches", `{"origin_session":"chat-b","jobs":[`+tc.members+`]}`, nil)
			require.Equal(t, http.StatusAccepted, status, "%v", out)
			var spawned []float64
			for _, j := range out["jobs"].([]any) {
				member := j.(map[string]any)
				spawned = append(spawned, member["index"].(float64))
				// Each member the answer names is a job of the batch.
				code, job := b.do(t, "GET", "/v1/jobs/"+member["id"].(string), "", nil)
				require.Equal(t, http.StatusOK, code, "%v", job)
				require.Equal(t, out["batch_id"], job["batch_id"])
				require.Equal(t, "chat-b", job["origin_session"])
			}
			require.Equal(t, tc.spawned, spawned)
			skipped, _ := out["skipped"].([]any)
			if tc.wantField == "" {
				require.Empty(t, skipped)
				return
			}
			require.Len(t, skipped, 1)
			skip := skipped[0].(map[string]any)
			require.Equal(t, tc.skipped, skip["index"])
			require.Equal(t, tc.wantField, skip["error"].(map[string]any)["field"])
		})
	}
}

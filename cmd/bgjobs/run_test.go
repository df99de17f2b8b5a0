package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bgjobs/bgjobs/agents/exampleagent"
	bgclient "github.com/bgjobs/bgjobs/client"
	"github.com/bgjobs/bgjobs/internal/testenv"
)

// lockedBuffer collects a process's output while it runs.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

var listeningRE = regexp.MustCompile(`listening on (http://[0-9.:]+)`)

// startServe calls run("serve") with env on top of a test namespace and
// returns the base URL once /healthz answers. The server stops when the
// test ends.
func startServe(t *testing.T, env map[string]string) string {
	t.Helper()
	base, _ := startServeLogged(t, env)
	return base
}

// startServeLogged is startServe, with what the server writes.
func startServeLogged(t *testing.T, env map[string]string) (string, *lockedBuffer) {
	t.Helper()
	te := testenv.New(t)
	vars := map[string]string{
		"BGJOBS_NAMESPACE":     te.Namespace,
		"BGJOBS_POLL_INTERVAL": "10ms",
		"BGJOBS_AGENT_ALLOW":   "127.0.0.1", // the tests' agents live on loopback
		"BGJOBS_ADDR":          "127.0.0.1:0",
		"BGJOBS_DATA_DIR":      t.TempDir(),
	}
	if testenv.Real() {
		vars["REDIS_URL"] = te.URL
	}
	for k, v := range env {
		vars[k] = v
	}
	ctx, cancel := context.WithCancel(context.Background())
	out := &lockedBuffer{}
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"serve"}, func(k string) string { return vars[k] }, out, out) }()
	t.Cleanup(func() {
		if t.Failed() && os.Getenv("BGJOBS_TEST_SERVE_LOG") != "" {
			t.Log(out.String())
		}
	})
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(20 * time.Second):
			t.Error("serve did not stop within 20s of its context ending")
		}
	})
	var base string
	testenv.Eventually(t, 10*time.Second, "serve to listen", func() bool {
		select {
		case err := <-done:
			t.Fatalf("serve exited early: %v\n%s", err, out.String())
		default:
		}
		m := listeningRE.FindStringSubmatch(out.String())
		if m == nil {
			return false
		}
		base = m[1]
		resp, err := http.Get(base + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return base, out
}

// client is a small JSON HTTP client for tests.
type client struct {
	t    *testing.T
	base string
	key  string
	as   string
}

func (c client) do(method, path string, body any, hdr ...string) (int, map[string]any) {
	c.t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		r = strings.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		require.NoError(c.t, err)
		r = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, c.base+path, r)
	require.NoError(c.t, err)
	req.Header.Set("Content-Type", "application/json")
	if c.key != "" {
		req.Header.Set("Authorization", "Bearer "+c.key)
	}
	if c.as != "" {
		req.Header.Set("X-Bgjobs-Agent", c.as)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(c.t, err)
	var out map[string]any
	if len(raw) > 0 {
		require.NoError(c.t, json.Unmarshal(raw, &out), "body: %s", raw)
	}
	return resp.StatusCode, out
}

func (c client) waitStatus(id, want string) map[string]any {
	c.t.Helper()
	var job map[string]any
	testenv.Eventually(c.t, 15*time.Second, id+" to be "+want, func() bool {
		code, j := c.do("GET", "/v1/jobs/"+id, nil)
		require.Equal(c.t, http.StatusOK, code, "%v", j)
		job = j
		return j["status"] == want
	})
	return job
}

// startAgent serves the example A2A agent and returns its /a2a URL and the
// log of messages it received.
func startAgent(t *testing.T) (string, *lockedBuffer) {
	return startDrainingAgent(t, nil)
}

// startDrainingAgent is startAgent with an agent that drains its session on
// every resume, through the Go client.
func startDrainingAgent(t *testing.T, drain *bgclient.Client) (string, *lockedBuffer) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	log := &lockedBuffer{}
	srv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: exampleagent.NewHandler(ln.Addr().String(), log, drain)}}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL + "/a2a", log
}

type received struct {
	ContextID string         `json:"context_id"`
	MessageID string         `json:"message_id"`
	Metadata  map[string]any `json:"metadata"`
	Text      string         `json:"text"`
}

func parseReceived(t *testing.T, log string) []received {
	var out []received
	sc := bufio.NewScanner(strings.NewReader(log))
	for sc.Scan() {
		var r received
		require.NoError(t, json.Unmarshal(sc.Bytes(), &r))
		out = append(out, r)
	}
	return out
}

// The lifecycle end to end: a turn and a work job are spawned over HTTP,
// run (the turn on a real A2A server), complete, and drain exactly once.
func TestLifecycleEndToEnd(t *testing.T) {
	t.Parallel()
	a2aURL, agentLog := startAgent(t)
	c := client{t: t, base: startServe(t, nil)}

	code, agent := c.do("PUT", "/v1/agents/default", map[string]any{
		"a2a_url":        a2aURL,
		"subagent_types": map[string]string{"researcher": "You are a research subagent."},
	})
	require.Equal(t, http.StatusOK, code, "%v", agent)
	require.Equal(t, "a2a", agent["resume"])

	code, turn := c.do("POST", "/v1/jobs", map[string]any{
		"origin_session": "chat-42", "kind": "turn", "subagent_type": "researcher",
		"description": "Research ship data", "prompt": "Find fuel figures for the fleet",
	})
	require.Equal(t, http.StatusAccepted, code, "%v", turn)
	require.Regexp(t, `^bg-[0-9a-f]{12}$`, turn["id"])
	require.Equal(t, "queued", turn["status"])
	require.Contains(t, turn["message"], "do NOT poll")
	code, work := c.do("POST", "/v1/jobs", map[string]any{
		"origin_session": "chat-42", "kind": "work", "description": "Smoke",
		"work": map[string]any{"type": "echo", "args": map[string]any{"text": "hello"}},
	})
	require.Equal(t, http.StatusAccepted, code, "%v", work)

	turnID, workID := turn["id"].(string), work["id"].(string)
	tj := c.waitStatus(turnID, "completed")
	require.Contains(t, tj["result"], "Report on: Find fuel figures for the fleet")
	require.Equal(t, "researcher", tj["subagent_type"])
	require.Equal(t, false, tj["notified"])
	wj := c.waitStatus(workID, "completed")
	require.Equal(t, "hello", wj["result"])

	code, drained := c.do("POST", "/v1/sessions/chat-42/drain", nil)
	require.Equal(t, http.StatusOK, code)
	ns := drained["notifications"].([]any)
	require.Len(t, ns, 2)
	texts := map[string]string{}
	for _, n := range ns {
		m := n.(map[string]any)
		texts[m["job_id"].(string)] = m["text"].(string)
	}
	require.Contains(t, texts[turnID], "<task-id>"+turnID+"</task-id>")
	require.Contains(t, texts[turnID], `<summary>Background agent "Research ship data" completed.</summary>`)
	require.Contains(t, texts[workID], "<result>hello</result>")

	code, again := c.do("POST", "/v1/sessions/chat-42/drain", nil)
	require.Equal(t, http.StatusOK, code)
	require.Empty(t, again["notifications"])
	_, tj = c.do("GET", "/v1/jobs/"+turnID, nil)
	require.Equal(t, true, tj["notified"])

	// The agent saw the turn, then one resume per job in the origin session.
	var turns, resumes []received
	testenv.Eventually(t, 10*time.Second, "two resumes", func() bool {
		turns, resumes = nil, nil
		for _, r := range parseReceived(t, agentLog.String()) {
			if strings.HasPrefix(r.ContextID, "background:") {
				turns = append(turns, r)
			} else {
				resumes = append(resumes, r)
			}
		}
		return len(resumes) == 2
	})
	require.Len(t, turns, 1)
	got := turns[0]
	require.Equal(t, "background:"+turnID, got.ContextID)
	require.Equal(t, turnID, got.MessageID)
	require.Equal(t, map[string]any{
		"origin": "background", "trigger": turnID, "origin_session": "chat-42",
		"subagent_type": "researcher", "disposable": true,
	}, got.Metadata)
	require.Equal(t, "You are a research subagent.\n\nFind fuel figures for the fleet", got.Text)

	byID := map[string]received{}
	for _, r := range resumes {
		byID[r.MessageID] = r
	}
	for _, id := range []string{turnID, workID} {
		r, ok := byID["resume-"+id]
		require.True(t, ok, "a resume for %s", id)
		require.Equal(t, "chat-42", r.ContextID)
		require.Equal(t, map[string]any{
			"origin": "background", "kind": "background.resume", "trigger": id, "jobs": []any{id},
			"batch_id": nil, "counts": map[string]any{"completed": 1.0, "failed": 0.0, "cancelled": 0.0}, "partial": false,
		}, r.Metadata)
		require.Contains(t, r.Text, "Drain")
	}
}

// A task the agent fails fails the job with its message; a report that
// comes back as a task's artifact is the result.
func TestTurnOutcomesThroughTasks(t *testing.T) {
	t.Parallel()
	a2aURL, _ := startAgent(t)
	c := client{t: t, base: startServe(t, nil)}
	code, _ := c.do("PUT", "/v1/agents/default", map[string]any{"a2a_url": a2aURL})
	require.Equal(t, http.StatusOK, code)

	_, failing := c.do("POST", "/v1/jobs", map[string]any{"origin_session": "s", "description": "f", "prompt": "please [fail]"})
	_, artifact := c.do("POST", "/v1/jobs", map[string]any{"origin_session": "s", "description": "a", "prompt": "answer as a [task]"})
	fj := c.waitStatus(failing["id"].(string), "failed")
	require.Contains(t, fj["error"], "asked to fail by the prompt")
	aj := c.waitStatus(artifact["id"].(string), "completed")
	require.Contains(t, aj["result"], "Report on: answer as a [task]")
}

// Agent B sees none of agent A's jobs: every endpoint answers 404 for A's
// ids; no key or a wrong key is 401.
func TestTenantIsolation(t *testing.T) {
	t.Parallel()
	base := startServe(t, map[string]string{"BGJOBS_API_KEYS": "alpha:key-a,beta:key-b", "BGJOBS_ADMIN_KEY": "admin-key"})
	a := client{t: t, base: base, key: "key-a"}
	b := client{t: t, base: base, key: "key-b"}

	code, j := a.do("POST", "/v1/jobs", map[string]any{"origin_session": "chat-1", "kind": "work", "description": "x",
		"work": map[string]any{"type": "echo", "args": map[string]any{"text": "secret"}}})
	require.Equal(t, http.StatusAccepted, code)
	id := j["id"].(string)
	a.waitStatus(id, "completed")

	for _, tc := range []struct{ method, path string }{
		{"GET", "/v1/jobs/" + id},
		{"POST", "/v1/jobs/" + id + "/cancel"},
		{"POST", "/v1/jobs/" + id + "/ack"},
		{"DELETE", "/v1/jobs/" + id},
		{"GET", "/v1/agents/alpha"},
		{"PUT", "/v1/agents/alpha"},
	} {
		var body any
		if tc.method == "PUT" {
			body = map[string]any{"a2a_url": "http://127.0.0.1:1/a2a"}
		}
		code, e := b.do(tc.method, tc.path, body)
		require.Equal(t, http.StatusNotFound, code, "%s %s: %v", tc.method, tc.path, e)
		require.Equal(t, "not_found", e["error"].(map[string]any)["code"])
	}
	code, list := b.do("GET", "/v1/jobs", nil)
	require.Equal(t, http.StatusOK, code)
	require.Empty(t, list["jobs"])
	code, drained := b.do("POST", "/v1/sessions/chat-1/drain", nil)
	require.Equal(t, http.StatusOK, code)
	require.Empty(t, drained["notifications"], "B's chat-1 is not A's chat-1")

	for _, key := range []string{"", "wrong", "key-a "} {
		code, e := client{t: t, base: base, key: key}.do("GET", "/v1/jobs/"+id, nil)
		if key == "key-a " {
			require.Equal(t, http.StatusOK, code, "surrounding space is trimmed")
			continue
		}
		require.Equal(t, http.StatusUnauthorized, code)
		require.Equal(t, "unauthenticated", e["error"].(map[string]any)["code"])
	}

	admin := client{t: t, base: base, key: "admin-key", as: "alpha"}
	code, _ = admin.do("GET", "/v1/jobs/"+id, nil)
	require.Equal(t, http.StatusOK, code, "the admin acts for alpha")
	code, e := client{t: t, base: base, key: "admin-key"}.do("GET", "/v1/jobs/"+id, nil)
	require.Equal(t, http.StatusBadRequest, code)
	require.Equal(t, "X-Bgjobs-Agent", e["error"].(map[string]any)["field"])
	code, _ = client{t: t, base: base, key: "key-b", as: "alpha"}.do("GET", "/v1/jobs/"+id, nil)
	require.Equal(t, http.StatusBadRequest, code, "only the admin may act for another agent")

	code, drained = a.do("POST", "/v1/sessions/chat-1/drain", nil)
	require.Equal(t, http.StatusOK, code)
	require.Len(t, drained["notifications"], 1)
}

func TestRefusesNonLoopbackWithoutKeys(t *testing.T) {
	t.Parallel()
	err := run(context.Background(), []string{"serve", "--addr", "0.0.0.0:0"}, func(string) string { return "" }, io.Discard, io.Discard)
	require.ErrorContains(t, err, "non-loopback")
}

// TestGCTarget: bgjobs runs at its own GC target unless GOGC chose one.
// Not parallel: the target is the whole process's.
func TestGCTarget(t *testing.T) {
	saved := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(saved) })
	require.NoError(t, run(context.Background(), []string{"--help"}, func(string) string { return "" }, io.Discard, io.Discard))
	require.Equal(t, gcPercentDefault, debug.SetGCPercent(100), "GOGC unset: bgjobs' default")
	env := map[string]string{"GOGC": "150"} // as the runtime read it at start
	require.NoError(t, run(context.Background(), []string{"--help"}, func(k string) string { return env[k] }, io.Discard, io.Discard))
	require.Equal(t, 100, debug.SetGCPercent(100), "GOGC set: left as the runtime has it")
}

func TestReadyz(t *testing.T) {
	t.Parallel()
	c := client{t: t, base: startServe(t, nil)}
	code, body := c.do("GET", "/readyz", nil)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "ready", body["status"])
	code, _ = c.do("GET", "/healthz", nil)
	require.Equal(t, http.StatusOK, code)
}

// TestLogLevelQuietsTheLinesOfEachJob runs serve as an operator would, at
// the default level and with BGJOBS_LOG_LEVEL=warn, and runs a job on
// each: the default writes a line for the request and for each of the
// job's events; warn writes none of them, nor the start-up line.
func TestLogLevelQuietsTheLinesOfEachJob(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		level string
		lines bool
	}{{"", true}, {"warn", false}} {
		t.Run("level="+cmp.Or(tc.level, "default"), func(t *testing.T) {
			t.Parallel()
			base, out := startServeLogged(t, map[string]string{"BGJOBS_LOG_LEVEL": tc.level})
			c := client{t: t, base: base}
			code, job := c.do("POST", "/v1/jobs", map[string]any{
				"origin_session": "chat-log", "kind": "work", "description": "Smoke",
				"work": map[string]any{"type": "echo", "args": map[string]any{"text": "hello"}},
			})
			require.Equal(t, http.StatusAccepted, code, "%v", job)
			c.waitStatus(job["id"].(string), "completed")
			perJob := []string{`"msg":"request"`, `"msg":"job spawned"`, `"msg":"job running"`, `"msg":"job settled"`, `"msg":"starting"`}
			if tc.lines {
				testenv.Eventually(t, 20*time.Second, "a line per request and per job event", func() bool {
					for _, line := range perJob {
						if !strings.Contains(out.String(), line) {
							return false
						}
					}
					return true
				})
				return
			}
			for _, line := range perJob {
				require.NotContains(t, out.String(), line, "warn writes no line of a job that went well")
			}
		})
	}
}

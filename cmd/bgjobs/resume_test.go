package main

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bgjobs/bgjobs/agents"
	"github.com/bgjobs/bgjobs/internal/testenv"
)

// webhookRecorder is a test endpoint that keeps every resume it receives,
// checking each signature.
type webhookRecorder struct {
	t       *testing.T
	secret  string
	mu      sync.Mutex
	got     []map[string]any
	status  int // answer with this while non-zero
	check   func(body map[string]any)
	seen    map[string]bool // message ids taken, as a receiver keeps them
	repeats int
	refused int // requests answered with status
}

func (w *webhookRecorder) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.status != 0 {
		w.refused++
		rw.WriteHeader(w.status)
		return
	}
	sig := r.Header.Get(agents.SignatureHeader)
	if !hmac.Equal([]byte(sig), []byte(agents.Sign(w.secret, body))) {
		w.t.Errorf("bad signature %q", sig)
	}
	if err := verifyTimed(w.secret, r.Header.Get(agents.TimedSignatureHeader), body, time.Now()); err != nil {
		w.t.Errorf("timed signature: %v", err)
	}
	if ua := r.Header.Get("User-Agent"); !strings.HasPrefix(ua, "bgjobs/") {
		w.t.Errorf("User-Agent %q does not name bgjobs", ua)
	}
	// Delivery is at least once: like any receiver, drop a repeat.
	id := r.Header.Get(agents.MessageIDHeader)
	if id == "" {
		w.t.Errorf("webhook without %s", agents.MessageIDHeader)
	}
	if w.seen[id] {
		w.repeats++
		return
	}
	if w.seen == nil {
		w.seen = map[string]bool{}
	}
	w.seen[id] = true
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		w.t.Errorf("webhook body: %v", err)
	}
	if w.check != nil {
		w.check(m)
	}
	w.got = append(w.got, m)
}

// verifyTimed is what a receiver does with the timed signature, written
// from the documentation: "t=<unix>,v1=<hex HMAC-SHA256 of "<t>.<body>">",
// compared in constant time, t within five minutes of the receiver's clock.
func verifyTimed(secret, header string, body []byte, now time.Time) error {
	var ts, v1 string
	for part := range strings.SplitSeq(header, ",") {
		k, v, _ := strings.Cut(part, "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			v1 = v
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || v1 == "" {
		return fmt.Errorf("malformed %q", header)
	}
	if d := now.Sub(time.Unix(sec, 0)); d > 5*time.Minute || d < -5*time.Minute {
		return fmt.Errorf("stale: signed %s ago", d)
	}
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(ts + "." + string(body)))
	if !hmac.Equal([]byte(v1), []byte(hex.EncodeToString(mac.Sum(nil)))) {
		return errors.New("signature does not match")
	}
	return nil
}

// The receiver above refuses a replay (an old t) and a changed body.
func TestTimedSignatureRefusesReplays(t *testing.T) {
	t.Parallel()
	body := []byte(`{"session":"chat-1"}`)
	now := time.Now()
	require.NoError(t, verifyTimed("k", agents.SignTimed("k", now, body), body, now))
	require.ErrorContains(t, verifyTimed("k", agents.SignTimed("k", now.Add(-10*time.Minute), body), body, now), "stale")
	require.ErrorContains(t, verifyTimed("k", agents.SignTimed("k", now, body), []byte(`{"session":"chat-2"}`), now), "does not match")
	require.ErrorContains(t, verifyTimed("other", agents.SignTimed("k", now, body), body, now), "does not match")
}

func (w *webhookRecorder) all() []map[string]any {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]map[string]any(nil), w.got...)
}

func (w *webhookRecorder) setStatus(s int) {
	w.mu.Lock()
	w.status = s
	w.mu.Unlock()
}

// serveWithWebhook starts serve with agent "default" taking resumes at a
// recording webhook signed with secret.
func serveWithWebhook(t *testing.T, secret string) (*webhookRecorder, string, client) {
	t.Helper()
	hook, url := startWebhook(t, secret)
	c := client{t: t, base: startServe(t, nil)}
	code, _ := c.do("PUT", "/v1/agents/default", map[string]any{"resume": "webhook", "webhook_url": url, "webhook_secret": secret})
	require.Equal(t, http.StatusOK, code)
	return hook, url, c
}

func startWebhook(t *testing.T, secret string) (*webhookRecorder, string) {
	w := &webhookRecorder{t: t, secret: secret}
	srv := httptest.NewServer(w)
	t.Cleanup(srv.Close)
	return w, srv.URL + "/hook"
}

func echoJob(session, text string, fail bool) map[string]any {
	return map[string]any{"origin_session": session, "kind": "work", "description": "echo " + text,
		"work": map[string]any{"type": "echo", "args": map[string]any{"text": text, "fail": fail}}}
}

// A webhook resume carries the documented object plus the session, signed
// with the agent's secret; none goes out for a background origin, an
// incognito job, or an agent with auto-resume off.
func TestWebhookResume(t *testing.T) {
	t.Parallel()
	hook, url, c := serveWithWebhook(t, "s3cret")

	_, j := c.do("POST", "/v1/jobs", echoJob("chat-7", "hi", false))
	id := j["id"].(string)
	testenv.Eventually(t, 10*time.Second, "the webhook", func() bool { return len(hook.all()) == 1 })
	require.Equal(t, map[string]any{
		"origin": "background", "kind": "background.resume", "trigger": id, "jobs": []any{id}, "batch_id": nil,
		"counts": map[string]any{"completed": 1.0, "failed": 0.0, "cancelled": 0.0}, "partial": false, "session": "chat-7",
	}, hook.all()[0])

	_, bg := c.do("POST", "/v1/jobs", echoJob("background:"+id, "quiet", false))
	incog := echoJob("chat-7", "secret", false)
	incog["incognito"] = true
	_, ij := c.do("POST", "/v1/jobs", incog)
	c.waitStatus(bg["id"].(string), "completed")
	c.waitStatus(ij["id"].(string), "completed")
	code, _ := c.do("PUT", "/v1/agents/default", map[string]any{"resume": "webhook", "webhook_url": url, "webhook_secret": "s3cret", "auto_resume": false})
	require.Equal(t, http.StatusOK, code)
	time.Sleep(2500 * time.Millisecond) // agent configurations are cached for 2 s
	_, off := c.do("POST", "/v1/jobs", echoJob("chat-7", "off", false))
	c.waitStatus(off["id"].(string), "completed")
	time.Sleep(time.Second)
	require.Len(t, hook.all(), 1, "no resume for a background origin, an incognito job, or auto-resume off")
}

// Batches over HTTP: a bad spec is skipped and reported, the rest join in
// one resume with per-status counts.
func TestBatchOverHTTP(t *testing.T) {
	t.Parallel()
	hook, _, c := serveWithWebhook(t, "k")
	var specs []any
	for i := range 7 {
		s := echoJob("", "m", i == 4)
		delete(s, "origin_session")
		specs = append(specs, s)
	}
	specs = append(specs, map[string]any{"kind": "work", "work": map[string]any{"type": "nope"}}, map[string]any{"kind": 5})
	code, res := c.do("POST", "/v1/batches", map[string]any{"origin_session": "chat-b", "jobs": specs})
	require.Equal(t, http.StatusAccepted, code, "%v", res)
	require.Regexp(t, `^bt-[0-9a-f]{12}$`, res["batch_id"])
	require.Len(t, res["jobs"], 7)
	skipped := res["skipped"].([]any)
	require.Len(t, skipped, 2)
	require.Equal(t, 7.0, skipped[0].(map[string]any)["index"])
	require.Equal(t, "work.type", skipped[0].(map[string]any)["error"].(map[string]any)["field"])
	require.Equal(t, "kind", skipped[1].(map[string]any)["error"].(map[string]any)["field"])

	bid := res["batch_id"].(string)
	testenv.Eventually(t, 10*time.Second, "the join", func() bool { return len(hook.all()) >= 1 })
	time.Sleep(500 * time.Millisecond)
	require.Len(t, hook.all(), 1)
	got := hook.all()[0]
	require.Equal(t, bid, got["trigger"])
	require.Equal(t, bid, got["batch_id"])
	require.Equal(t, map[string]any{"completed": 6.0, "failed": 1.0, "cancelled": 0.0}, got["counts"])

	code, b := c.do("GET", "/v1/batches/"+bid, nil)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, true, b["joined"])
	require.Equal(t, false, b["partial"])
	require.Equal(t, 7.0, b["size"])
	require.Equal(t, 7.0, b["settled"])
	require.NotNil(t, b["joined_at"])

	code, e := c.do("POST", "/v1/batches", map[string]any{"origin_session": "chat-b", "jobs": []any{map[string]any{"kind": "work"}}})
	require.Equal(t, http.StatusBadRequest, code, "all bad: %v", e)
	code, _ = c.do("GET", "/v1/batches/bt-000000000000", nil)
	require.Equal(t, http.StatusNotFound, code)
}

func TestBusyAndIdleOverHTTP(t *testing.T) {
	t.Parallel()
	hook, _, c := serveWithWebhook(t, "k")
	code, busy := c.do("POST", "/v1/sessions/chat-9/busy", map[string]any{"ttl_s": 600})
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, map[string]any{"session": "chat-9", "busy": true}, busy)
	_, j := c.do("POST", "/v1/jobs", echoJob("chat-9", "x", false))
	c.waitStatus(j["id"].(string), "completed")
	time.Sleep(700 * time.Millisecond)
	require.Empty(t, hook.all())
	code, idle := c.do("POST", "/v1/sessions/chat-9/idle", nil)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, false, idle["busy"])
	testenv.Eventually(t, 20*time.Second, "one resume", func() bool { return len(hook.all()) == 1 })

	code, e := c.do("POST", "/v1/sessions/chat-9/busy", map[string]any{"ttl_s": -3})
	require.Equal(t, http.StatusBadRequest, code)
	require.Equal(t, "ttl_s", e["error"].(map[string]any)["field"])
}

// A resume never gives up silently: a webhook answering 500 past the retry
// budget leaves the failure on the job's row and in the events, the resume
// is sent again at the slow cadence, and once the receiver answers it is
// delivered, once.
func TestFailingWebhookIsRetriedVisiblyUntilDelivered(t *testing.T) {
	t.Parallel()
	hook, url := startWebhook(t, "s3cret")
	hook.setStatus(http.StatusInternalServerError)
	c := client{t: t, base: startServe(t, map[string]string{"BGJOBS_RESUME_RETRIES": "1", "BGJOBS_RESUME_AGAIN_INTERVAL": "1s"})}
	code, _ := c.do("PUT", "/v1/agents/default", map[string]any{"resume": "webhook", "webhook_url": url, "webhook_secret": "s3cret"})
	require.Equal(t, http.StatusOK, code)
	_, j := c.do("POST", "/v1/jobs", echoJob("chat-500", "hi", false))
	id := j["id"].(string)

	var row map[string]any
	testenv.Eventually(t, 30*time.Second, "the failure on the row, past the retry budget", func() bool {
		_, row = c.do("GET", "/v1/jobs/"+id, nil)
		return row["resume_state"] == "failed" && row["resume_error"] != nil
	})
	require.Equal(t, "webhook answered 500 Internal Server Error", row["resume_error"])
	testenv.Eventually(t, 30*time.Second, "a slow re-send after the retry budget (1 try + 1 retry)", func() bool {
		hook.mu.Lock()
		defer hook.mu.Unlock()
		return hook.refused >= 3
	})
	require.Empty(t, hook.all(), "nothing delivered while the receiver fails")

	hook.setStatus(0)
	testenv.Eventually(t, 30*time.Second, "delivery once the receiver answers", func() bool { return len(hook.all()) == 1 })
	testenv.Eventually(t, 10*time.Second, "the row saying so", func() bool {
		_, row = c.do("GET", "/v1/jobs/"+id, nil)
		return row["resume_state"] == "delivered"
	})
	require.Nil(t, row["resume_error"])
	time.Sleep(2500 * time.Millisecond)
	require.Len(t, hook.all(), 1, "delivered once")

	// The failures were events for people watching.
	req, _ := http.NewRequest("GET", c.base+"/v1/events?last_event_id=0", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	require.NoError(t, err)
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body) // until the deadline
	require.Contains(t, string(body), "event: background.resume_failed")
}

package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// canary listens on loopback and counts the connections it receives.
func canary(t *testing.T) (port int, hits *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	hits = &atomic.Int64{}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			hits.Add(1)
			_ = c.Close()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port, hits
}

// Agents' URLs cannot reach internal space: a literal internal address is
// refused when the agent is registered (400, in every spelling), a name
// that resolves to loopback and a redirect from an allowed host are refused
// at the dial — the canary on loopback receives not one connection — while
// an allow-listed agent on loopback still runs turns. No reply body reaches
// a job's error.
func TestAgentURLsCannotReachInternalSpace(t *testing.T) {
	t.Parallel()
	port, hits := canary(t)
	a2aURL, _ := startAgent(t)
	agentHost := strings.TrimSuffix(strings.TrimPrefix(a2aURL, "http://"), "/a2a")
	redirector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, fmt.Sprintf("http://127.0.0.1:%d/a2a", port), http.StatusTemporaryRedirect)
	}))
	t.Cleanup(redirector.Close)
	redirectHost := strings.TrimPrefix(redirector.URL, "http://")
	c := client{t: t, base: startServe(t, map[string]string{
		"BGJOBS_AGENT_ALLOW": agentHost + "," + redirectHost, // host:port only: the canary's port is not allowed
		"BGJOBS_API_KEYS":    "alpha:ka,beta:kb",
	})}
	alpha, beta := c, c
	alpha.key, beta.key = "ka", "kb"

	for _, host := range []string{"127.0.0.1", "[::1]", "2130706433", "0x7f000001", "0177.0.0.1", "127.1",
		"[::ffff:127.0.0.1]", "[::7f00:1]", "[64:ff9b::7f00:1]", "[2002:7f00:1::]", "0.0.0.0", "169.254.169.254", "10.0.0.1",
		"198.18.0.1", "255.255.255.255", "[fec0::1]"} {
		for _, field := range []string{"a2a_url", "webhook_url"} {
			body := map[string]any{field: fmt.Sprintf("http://%s:%d/a2a", host, port)}
			if field == "webhook_url" {
				body["resume"], body["webhook_secret"] = "webhook", "s"
			}
			code, resp := beta.do("PUT", "/v1/agents/beta", body)
			require.Equal(t, http.StatusBadRequest, code, "%s %s: %v", field, host, resp)
			require.Equal(t, field, resp["error"].(map[string]any)["field"], host)
		}
	}

	// Names and redirects pass registration and are refused at the dial.
	for _, target := range []string{fmt.Sprintf("http://localhost:%d/a2a", port), redirector.URL + "/a2a"} {
		code, resp := beta.do("PUT", "/v1/agents/beta", map[string]any{"a2a_url": target, "resume": "webhook",
			"webhook_url": target, "webhook_secret": "s"})
		require.Equal(t, http.StatusOK, code, "%v", resp)
		_, job := beta.do("POST", "/v1/jobs", map[string]any{"origin_session": "s", "description": "probe", "prompt": "x"})
		failed := beta.waitStatus(job["id"].(string), "failed")
		require.Contains(t, failed["error"], "address not allowed", target)
		_, drain := beta.do("POST", "/v1/sessions/s/drain", nil)
		require.NotEmpty(t, drain["notifications"])
	}

	// The allow-listed agent works.
	code, resp := alpha.do("PUT", "/v1/agents/alpha", map[string]any{"a2a_url": a2aURL})
	require.Equal(t, http.StatusOK, code, "%v", resp)
	_, job := alpha.do("POST", "/v1/jobs", map[string]any{"origin_session": "s", "description": "ok", "prompt": "hello"})
	done := alpha.waitStatus(job["id"].(string), "completed")
	require.Contains(t, done["result"], "hello")

	// The refused resumes were tried while the last job ran; a retry comes
	// a second later: give it its chance, then count.
	time.Sleep(1500 * time.Millisecond)
	require.Zero(t, hits.Load(), "the canary on loopback was never reached")
}

// A delegate reaches only the caller's own agent or those the admin lets it
// reach; another tenant's agent answers exactly like one that does not
// exist. Only the admin sets delegate_to, and an agent's own update keeps it.
func TestDelegateStaysWithinTheTenant(t *testing.T) {
	t.Parallel()
	a2aURL, log := startAgent(t)
	c := client{t: t, base: startServe(t, map[string]string{"BGJOBS_API_KEYS": "alpha:ka,beta:kb", "BGJOBS_ADMIN_KEY": "adm",
		"BGJOBS_AUTO_RESUME": "false"})}
	alpha, beta, admin := c, c, c
	alpha.key, beta.key, admin.key = "ka", "kb", "adm"
	for _, who := range []client{alpha, beta} {
		name := map[string]string{"ka": "alpha", "kb": "beta"}[who.key]
		code, resp := who.do("PUT", "/v1/agents/"+name, map[string]any{"a2a_url": a2aURL})
		require.Equal(t, http.StatusOK, code, "%v", resp)
	}
	delegate := func(who client, to string) (int, map[string]any) {
		return who.do("POST", "/v1/jobs", map[string]any{"origin_session": "s", "kind": "work", "description": "ask " + to,
			"work": map[string]any{"type": "delegate", "args": map[string]any{"agent": to, "message": "secret question for " + to}}})
	}

	codeForeign, foreign := delegate(beta, "alpha")
	codeNobody, nobody := delegate(beta, "nobody")
	require.Equal(t, http.StatusBadRequest, codeForeign, "%v", foreign)
	require.Equal(t, codeNobody, codeForeign)
	fe, ne := foreign["error"].(map[string]any), nobody["error"].(map[string]any)
	require.Equal(t, "work.args.agent", fe["field"])
	require.Equal(t, ne["message"], strings.ReplaceAll(fe["message"].(string), `"alpha"`, `"nobody"`),
		"a foreign agent reads like one that does not exist")
	require.NotContains(t, log.String(), "secret question", "alpha's agent heard nothing")

	code, resp := beta.do("PUT", "/v1/agents/beta", map[string]any{"a2a_url": a2aURL, "delegate_to": []string{"alpha"}})
	require.Equal(t, http.StatusBadRequest, code, "an agent cannot widen its own reach: %v", resp)
	code, resp = admin.do("PUT", "/v1/agents/beta", map[string]any{"a2a_url": a2aURL, "delegate_to": []string{"alpha"}})
	require.Equal(t, http.StatusOK, code, "%v", resp)
	code, resp = beta.do("PUT", "/v1/agents/beta", map[string]any{"a2a_url": a2aURL})
	require.Equal(t, http.StatusOK, code, "%v", resp)
	require.Equal(t, []any{"alpha"}, resp["delegate_to"], "beta's own update keeps what the admin set")

	code, job := delegate(beta, "alpha")
	require.Equal(t, http.StatusAccepted, code, "%v", job)
	beta.waitStatus(job["id"].(string), "completed")
	require.Contains(t, log.String(), "secret question for alpha")
	code, own := delegate(alpha, "alpha")
	require.Equal(t, http.StatusAccepted, code, "an agent may always delegate to itself: %v", own)
}

// Requests net/http cannot parse (a raw "%" in the path, an oversize
// request line) are answered before any handler runs; they still get the
// API's JSON error shape.
func TestUnparseableRequestsGetJSONErrors(t *testing.T) {
	t.Parallel()
	base := startServe(t, nil)
	addr := strings.TrimPrefix(base, "http://")
	for _, tc := range []struct {
		desc, request, status, code string
	}{
		{"a raw % in the path", "GET /v1/jobs/%zz HTTP/1.1\r\nHost: x\r\n\r\n", "400", "invalid_argument"},
		{"a 2 MiB query", "GET /v1/jobs?q=" + strings.Repeat("a", 2<<20) + " HTTP/1.1\r\nHost: x\r\n\r\n", "431", "too_large"},
	} {
		conn, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		_, _ = conn.Write([]byte(tc.request))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		require.NoError(t, err, tc.desc)
		body, _ := io.ReadAll(resp.Body)
		conn.Close()
		require.Equal(t, tc.status, strconv.Itoa(resp.StatusCode), tc.desc)
		require.Equal(t, "application/json", resp.Header.Get("Content-Type"), tc.desc)
		var e struct {
			Error struct{ Code, Message string }
		}
		require.NoError(t, json.Unmarshal(body, &e), "%s: %s", tc.desc, body)
		require.Equal(t, tc.code, e.Error.Code, tc.desc)
		require.NotEmpty(t, e.Error.Message)
	}
	code, _ := client{t: t, base: base}.do("GET", "/v1/jobs", nil)
	require.Equal(t, http.StatusOK, code, "ordinary requests pass untouched")
}

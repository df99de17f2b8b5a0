package main

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// asynqmon renders in a real browser for the admin: the page lists the
// turns and work queues (its inline bootstrap runs under its own policy).
// A signed-in agent that is not the admin sees a page saying why, with the
// way to sign in as the admin, which leads back to the dashboard.
func TestMonitoringRendersForTheAdmin(t *testing.T) {
	t.Parallel()
	a2aURL, _ := startAgent(t)
	base := startServe(t, map[string]string{"BGJOBS_API_KEYS": "alpha:ka", "BGJOBS_ADMIN_KEY": "adm", "BGJOBS_AUTO_RESUME": "false"})
	alpha := client{t: t, base: base, key: "ka"}
	code, _ := alpha.do("PUT", "/v1/agents/alpha", map[string]any{"a2a_url": a2aURL})
	require.Equal(t, http.StatusOK, code)
	// Both queues exist once a job of each kind was queued.
	_, j := alpha.do("POST", "/v1/jobs", map[string]any{"origin_session": "s", "description": "t", "prompt": "hello"})
	alpha.waitStatus(j["id"].(string), "completed")
	_, j = alpha.do("POST", "/v1/jobs", map[string]any{"origin_session": "s", "kind": "work", "description": "w",
		"work": map[string]any{"type": "echo", "args": map[string]any{"text": "x"}}})
	alpha.waitStatus(j["id"].(string), "completed")

	// An agent's key: a page, not JSON, with the way in.
	req, _ := http.NewRequest("GET", base+"/monitoring/", nil)
	req.Header.Set("Accept", "text/html")
	req.AddCookie(&http.Cookie{Name: "bgjobs_session", Value: signIn(t, base, "ka")})
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	require.Contains(t, resp.Header.Get("Content-Type"), "text/html")
	require.Contains(t, string(page), "needs the admin key")
	require.Contains(t, string(page), `href="/login?next=/monitoring/"`)

	ctx := browser(t)
	open(t, ctx, base+"/login?next="+url.QueryEscape("/monitoring/"), "input[name=key]")
	require.NoError(t, chromedp.Do(ctx, chromedp.SendKeys("input[name=key]", "adm"), chromedp.Submit("input[name=key]")))
	until(t, ctx, "asynqmon listing the turns and work queues",
		`document.body.innerText.includes(':turns') && document.body.innerText.includes(':work')`)
	shot(t, ctx, "asynqmon")
	require.True(t, strings.Contains(text(ctx, "#root"), "Queues"), "the dashboard rendered: %q", text(ctx, "#root"))
}

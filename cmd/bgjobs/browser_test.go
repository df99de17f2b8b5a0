package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/bgjobs/bgjobs/internal/testenv"
)

// browser starts headless Chromium for one test; .ci/run installs it.
func browser(t *testing.T) context.Context {
	t.Helper()
	bin := ""
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			bin = p
			break
		}
	}
	if bin == "" {
		testenv.SkipOrFail(t, "no Chromium for browser tests (apt-get install -y chromium)")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-quic", true), chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	require.NoError(t, chromedp.Do(ctx)) // starts the browser
	return ctx
}

// shot keeps a screenshot in the test's artifact directory.
func shot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // 100: PNG
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(t.ArtifactDir(), name+".png"), png, 0o644))
}

// until polls a JavaScript condition in the page.
func until(t *testing.T, ctx context.Context, what, js string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](js)); err == nil && ok {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	shot(t, ctx, "timeout")
	t.Fatalf("the page never showed %s", what)
}

func text(ctx context.Context, sel string) string {
	s, _ := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(`(document.querySelector(%q)||{}).textContent||""`, sel)))
	return strings.TrimSpace(s)
}

// open navigates and waits for an element.
func open(t *testing.T, ctx context.Context, u, sel string) {
	t.Helper()
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(u)))
	until(t, ctx, sel, fmt.Sprintf(`!!document.querySelector(%q)`, sel))
}

// click clicks the first element sel matches.
func click(t *testing.T, ctx context.Context, sel string) {
	t.Helper()
	until(t, ctx, sel+" to click", fmt.Sprintf(`(function(){var e=document.querySelector(%q); if(!e){return false}; e.click(); return true})()`, sel))
}

// The console in a real browser: jobs spawned through the API appear
// without a reload, the pill count rises and falls, the unread dot appears
// and clears, progress shows on the running card, "Open report" shows the
// rendered markdown, and a hostile report runs nothing.
func TestConsoleInABrowser(t *testing.T) {
	t.Parallel()
	a2aURL, _ := startAgent(t)
	base := startServe(t, map[string]string{"BGJOBS_AUTO_RESUME": "false"})
	c := client{t: t, base: base}
	code, _ := c.do("PUT", "/v1/agents/default", map[string]any{"a2a_url": a2aURL})
	require.Equal(t, http.StatusOK, code)
	ctx := browser(t)
	open(t, ctx, base+"/", "#jobs")
	until(t, ctx, "the live stream connected", `!!document.querySelector('[sse-connect]')`)
	time.Sleep(500 * time.Millisecond) // the EventSource opens
	shot(t, ctx, "1-empty")

	// A slow turn with streamed progress, spawned through the API.
	_, j := c.do("POST", "/v1/jobs", map[string]any{"origin_session": "chat-b", "description": "Survey the harbour",
		"prompt": "[progress 3 700ms]\nsurvey the harbour\n\n# Harbour survey\n\nAll **clear**."})
	turnID := j["id"].(string)
	until(t, ctx, "the new job, without a reload", `document.querySelector('#jobs').innerText.includes('Survey the harbour')`)
	until(t, ctx, "the pill counting it", `document.querySelector('#running-count').textContent.trim() === '1' && document.querySelector('#pill').classList.contains('busy')`)
	until(t, ctx, "progress on the running card", `(document.querySelector('[data-job="`+turnID+`"] .progress')||{textContent:''}).textContent.includes('of 3')`)
	shot(t, ctx, "2-running")
	until(t, ctx, "the pill falling back", `document.querySelector('#running-count').textContent.trim() === '0'`)
	until(t, ctx, "the unread dot", `!document.querySelector('#unread').hidden`)
	shot(t, ctx, "3-unread")
	click(t, ctx, "#jobs")
	until(t, ctx, "the dot cleared on opening the list", `document.querySelector('#unread').hidden`)

	// Open report: the markdown rendered.
	click(t, ctx, `[data-job="`+turnID+`"] a.button.primary`)
	until(t, ctx, "the viewer", `!!document.querySelector('.markdown')`)
	until(t, ctx, "the rendered report", `!!document.querySelector('.markdown strong') && document.querySelector('.markdown strong').textContent === 'clear'`)
	shot(t, ctx, "4-report")

	// A hostile report runs nothing in the viewer.
	_, x := c.do("POST", "/v1/jobs", map[string]any{"origin_session": "chat-b", "kind": "work", "description": "Hostile",
		"work": map[string]any{"type": "echo", "args": map[string]any{"text": xssCorpus}}})
	xid := x["id"].(string)
	c.waitStatus(xid, "completed")
	open(t, ctx, base+"/jobs/"+xid, ".markdown")
	// Click every link and element the corpus tried to arm.
	_, _ = chromedp.Run(ctx, chromedp.Evaluate[bool](`document.querySelectorAll('.markdown a, .markdown div, .markdown img').forEach(function(e){try{e.click()}catch(_){}}); true`))
	time.Sleep(700 * time.Millisecond)
	pwned, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`typeof window.pwned !== 'undefined'`))
	require.NoError(t, err)
	shot(t, ctx, "5-hostile")
	require.False(t, pwned, "injected code ran")
	require.Contains(t, text(ctx, ".markdown h1"), "Findings")
}

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
	until(t, ctx, "the live stream connected", `document.body.dataset.live === '1'`)
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
	// Live updates patch the row an event names, never the whole list: a
	// streaming turn's events cost a few row fetches.
	fetches, err := chromedp.Run(ctx, chromedp.Evaluate[int](`performance.getEntriesByType('resource').filter(function(e){return e.name.indexOf('/console/jobs/')>=0}).length`))
	require.NoError(t, err)
	require.LessOrEqual(t, fetches, 12, "row fetches for one streaming turn")
	t.Logf("row fetches for one streaming turn with 3 progress updates: %d", fetches)
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

// The console as an operator uses it: sign in as the admin, switch agents,
// cancel, retry and delete jobs from their rows and see each row change
// live, open a batch page listing its members, read a report with a table,
// code and a quote, meet an HTML error page, and a header that fits a
// phone.
func TestConsoleActionsInABrowser(t *testing.T) {
	t.Parallel()
	base := startServe(t, map[string]string{"BGJOBS_API_KEYS": "alpha:ka,beta:kb", "BGJOBS_ADMIN_KEY": "adm", "BGJOBS_AUTO_RESUME": "false"})
	a, b := client{t: t, base: base, key: "ka"}, client{t: t, base: base, key: "kb"}
	echo := func(c client, desc, text string, delayMS int, fail bool) string {
		code, j := c.do("POST", "/v1/jobs", map[string]any{"origin_session": "chat-ops", "kind": "work", "description": desc,
			"work": map[string]any{"type": "echo", "args": map[string]any{"text": text, "delay_ms": delayMS, "fail": fail}}})
		require.Equal(t, http.StatusAccepted, code, "%v", j)
		return j["id"].(string)
	}
	report := "# Findings\n\n| ship | fuel |\n| --- | --- |\n| Aurora | 412 t |\n| Borealis | 388 t |\n\n> Figures from the harbour master.\n\n```go\nfmt.Println(\"ok\")\n```\n"
	done := echo(a, "Fleet report", report, 0, false)
	slow := echo(a, "Slow survey", "slow", 60000, false)
	broken := echo(a, "Broken job", "it broke", 1500, true)
	echo(b, "Beta job", "beta", 0, false)
	_, bt := a.do("POST", "/v1/batches", map[string]any{"origin_session": "chat-ops", "jobs": []any{
		map[string]any{"kind": "work", "description": "Member one", "work": map[string]any{"type": "echo", "args": map[string]any{"text": "1", "delay_ms": 1500}}},
		map[string]any{"kind": "work", "description": "Member two", "work": map[string]any{"type": "echo", "args": map[string]any{"text": "2", "delay_ms": 1500}}},
	}})
	bid := bt["batch_id"].(string)
	a.waitStatus(done, "completed")
	a.waitStatus(broken, "failed")

	ctx := browser(t)
	open(t, ctx, base+"/login", "input[name=key]")
	require.NoError(t, chromedp.Do(ctx, chromedp.SendKeys("input[name=key]", "adm"), chromedp.Submit("input[name=key]")))
	until(t, ctx, "alpha's jobs for the admin", `document.querySelector('#jobs').innerText.includes('Slow survey')`)
	until(t, ctx, "the live stream", `document.body.dataset.live === '1'`)
	until(t, ctx, "queued and running counted apart", `/\d+ queued · \d+ running/.test(document.querySelector('#pill').innerText)`)
	shot(t, ctx, "console-list")
	until(t, ctx, "took for an ended job only (a running one shows its elapsed time by its status)",
		`!document.querySelector('#job-`+slow+` .facts').innerText.includes('took') && document.querySelector('#job-`+done+` .facts').innerText.includes('took')`)

	// The switcher: beta's jobs, not alpha's; then back.
	_, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(function(){var s=document.querySelector('#agent'); s.value='beta'; s.dispatchEvent(new Event('change')); return true})()`))
	require.NoError(t, err)
	until(t, ctx, "beta's jobs", `document.querySelector('#jobs').innerText.includes('Beta job') && !document.querySelector('#jobs').innerText.includes('Slow survey')`)
	open(t, ctx, base+"/?agent=alpha", "#job-"+slow)
	until(t, ctx, "the live stream", `document.body.dataset.live === '1'`)

	// Cancel, retry, delete: each row changes in place.
	click(t, ctx, "#job-"+slow+" .act.cancel")
	until(t, ctx, "the cancelled row", `document.querySelector('#job-`+slow+`').classList.contains('cancelled')`)
	click(t, ctx, "#job-"+broken+" .act.retry")
	until(t, ctx, "the retried row running again", `!document.querySelector('#job-`+broken+`').classList.contains('failed')`)
	until(t, ctx, "the retry's outcome, live", `document.querySelector('#job-`+broken+`').classList.contains('failed') && document.querySelector('#job-`+broken+` .facts').innerText.includes('attempts 2')`)
	click(t, ctx, "#job-"+slow+" .act.delete")
	until(t, ctx, "the deleted row gone", `!document.querySelector('#job-`+slow+`')`)
	code, _ := a.do("GET", "/v1/jobs/"+slow, nil)
	require.Equal(t, http.StatusNotFound, code, "deleted for the API too")

	// A batch page: its members by title, their status live, the join.
	open(t, ctx, base+"/batches/"+bid+"?agent=alpha", "#members")
	until(t, ctx, "the members by title", `document.querySelector('#members').innerText.includes('Member one') && document.querySelector('#members').innerText.includes('Member two')`)
	until(t, ctx, "the members completing and the join, live", `document.querySelectorAll('#members .job.completed').length === 2 && document.querySelector('#batch-state').innerText.includes('Joined')`)
	shot(t, ctx, "console-batch")

	// The viewer: the job's details, a table, code and a quote.
	open(t, ctx, base+"/jobs/"+done+"?agent=alpha", ".markdown table")
	until(t, ctx, "code and a quote", `!!document.querySelector('.markdown pre code') && !!document.querySelector('.markdown blockquote')`)
	until(t, ctx, "the job's details", `document.querySelector('.facts').innerText.includes('attempts 1') || document.querySelector('.facts').innerText.includes('attempt 1')`)
	shot(t, ctx, "console-viewer")

	// A missing job: an HTML page, not JSON.
	open(t, ctx, base+"/jobs/bg-000000000000?agent=alpha", ".card")
	until(t, ctx, "a page saying so", `document.querySelector('.card').innerText.includes('Not Found')`)

	// A phone: the header stays one line.
	require.NoError(t, chromedp.Do(ctx, chromedp.EmulateViewport(375, 740)))
	open(t, ctx, base+"/?agent=alpha", "#jobs")
	until(t, ctx, "a one-line header that fits", `document.querySelector('.bar').getBoundingClientRect().height < 60 && document.querySelector('.bar').scrollWidth <= document.querySelector('.bar').clientWidth`)
	shot(t, ctx, "console-phone")

	// Sign out, from the page's own button: the sign-in page, and the
	// console no longer opens.
	click(t, ctx, `form[action="/logout"] button`)
	until(t, ctx, "the sign-in page", `!!document.querySelector('input[name=key]')`)
	open(t, ctx, base+"/?agent=alpha", "input[name=key]")
}

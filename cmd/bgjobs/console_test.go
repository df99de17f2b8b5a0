package main

import (
	"encoding/json"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bgjobs/bgjobs/internal/testenv"
)

// xssCorpus is report markdown that tries every way we know to run code.
const xssCorpus = "# Findings\n\nPlain **bold** text.\n\n" +
	"<script>window.pwned=1</script>\n\n" +
	"<img src=x onerror=\"window.pwned=2\">\n\n" +
	"[click](javascript:window.pwned=3) [enc](&#106;avascript:window.pwned=4) [data](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)\n\n" +
	"<svg onload=\"window.pwned=5\"><circle r=1 /></svg>\n\n" +
	"<iframe src=\"javascript:window.pwned=6\"></iframe>\n\n" +
	"<a href=\"JaVaScRiPt:window.pwned=7\">x</a> <div onclick=\"window.pwned=8\">y</div>\n\n" +
	"<object data=\"javascript:window.pwned=9\"></object><embed src=\"javascript:1\">\n"

// noClient does not follow redirects, so tests see them.
var noClient = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// signIn signs in at base with key as a browser does and returns the
// sign-in cookie's value.
func signIn(t *testing.T, base, key string) string {
	t.Helper()
	resp, err := noClient.PostForm(base+"/login", url.Values{"key": {key}})
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	for _, c := range resp.Cookies() {
		if c.Name == "bgjobs_session" {
			return c.Value
		}
	}
	t.Fatal("no sign-in cookie")
	return ""
}

// getPage asks for u with a sign-in cookie (session) and a bearer key,
// each when not empty.
func getPage(t *testing.T, method, u, session, key string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, nil)
	require.NoError(t, err)
	if session != "" {
		req.AddCookie(&http.Cookie{Name: "bgjobs_session", Value: session})
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := noClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func TestConsolePagesAndTheirDefences(t *testing.T) {
	t.Parallel()
	base := startServe(t, map[string]string{"BGJOBS_API_KEYS": "alpha:ka", "BGJOBS_ADMIN_KEY": "adm", "BGJOBS_AUTO_RESUME": "false"})
	a := client{t: t, base: base, key: "ka"}
	_, j := a.do("POST", "/v1/jobs", map[string]any{"origin_session": "chat-x", "kind": "work", "description": "Hostile report",
		"work": map[string]any{"type": "echo", "args": map[string]any{"text": xssCorpus}}})
	id := j["id"].(string)
	a.waitStatus(id, "completed")

	resp, _ := getPage(t, "GET", base+"/", "", "")
	require.Equal(t, http.StatusSeeOther, resp.StatusCode, "signed out: to the sign-in page")
	require.True(t, strings.HasPrefix(resp.Header.Get("Location"), "/login"))

	// Sign in: an HttpOnly, SameSite=Strict cookie that holds a sign-in's
	// token, not the key.
	form := url.Values{"key": {"ka"}}
	lresp, err := noClient.PostForm(base+"/login", form)
	require.NoError(t, err)
	lresp.Body.Close()
	require.Equal(t, http.StatusSeeOther, lresp.StatusCode)
	var ck *http.Cookie
	for _, c := range lresp.Cookies() {
		if c.Name == "bgjobs_session" {
			ck = c
		}
	}
	require.NotNil(t, ck)
	require.True(t, ck.HttpOnly)
	require.Equal(t, http.SameSiteStrictMode, ck.SameSite)
	require.NotContains(t, ck.Value, "ka")
	sess := ck.Value
	resp, _ = getPage(t, "GET", base+"/", "ka", "")
	require.Equal(t, http.StatusSeeOther, resp.StatusCode, "the key itself in the cookie signs nobody in")
	// Back where sign-in was asked from, on this server only. A client
	// reads "/\host" and "/<tab>/host" as "//host", another site; Chromium
	// would not follow such a redirect after a form (the console's CSP says
	// form-action 'self'), but the answer itself must not name another host.
	for next, want := range map[string]string{"/memory?q=fuel": "/memory?q=fuel", "/\\evil.example/": "/", "/\t/evil.example/": "/", "https://evil.example/": "/"} {
		r, err := noClient.PostForm(base+"/login?next="+url.QueryEscape(next), form)
		require.NoError(t, err)
		r.Body.Close()
		require.Equal(t, want, r.Header.Get("Location"), "next %q", next)
	}
	bad, err := noClient.PostForm(base+"/login", url.Values{"key": {"nope"}})
	require.NoError(t, err)
	bad.Body.Close()
	require.Equal(t, http.StatusUnauthorized, bad.StatusCode)

	resp, home := getPage(t, "GET", base+"/", sess, "")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, home, "Hostile report")
	require.Contains(t, home, `href="/jobs/`+id+`"`, "the report card opens the report")
	csp := resp.Header.Get("Content-Security-Policy")
	require.Contains(t, csp, "script-src 'self'")
	require.NotContains(t, csp, "unsafe-inline")
	require.Contains(t, csp, "frame-ancestors 'none'")
	require.Equal(t, "nosniff", resp.Header.Get("X-Content-Type-Options"))
	require.NotRegexp(t, regexp.MustCompile(`<script>[^<]`), home, "no inline script on the page")

	resp, viewer := getPage(t, "GET", base+"/jobs/"+id, "", "ka")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, viewer, "<h1>Findings</h1>")
	require.Contains(t, viewer, "<strong>bold</strong>")
	body := viewer[strings.Index(viewer, `<div class="markdown">`):]
	for _, bad := range []string{"<script", "onerror", "onload", "onclick", "javascript:", "JaVaScRiPt", "<iframe", "<svg", "<object", "<embed", "data:text/html", "window.pwned="} {
		require.NotContains(t, strings.ToLower(body), strings.ToLower(bad), "the viewer must not carry %q", bad)
	}

	// A batch page shows counts and the join state.
	code, br := a.do("POST", "/v1/batches", map[string]any{"origin_session": "chat-x", "jobs": []any{
		map[string]any{"kind": "work", "description": "m1", "work": map[string]any{"type": "echo", "args": map[string]any{"text": "a"}}},
		map[string]any{"kind": "work", "description": "m2", "work": map[string]any{"type": "echo", "args": map[string]any{"text": "b", "fail": true}}}}})
	require.Equal(t, http.StatusAccepted, code)
	bid := br["batch_id"].(string)
	testenv.Eventually(t, 10*time.Second, "the batch to join", func() bool {
		_, b := a.do("GET", "/v1/batches/"+bid, nil)
		return b["joined"] == true
	})
	resp, bpage := getPage(t, "GET", base+"/batches/"+bid, sess, "")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, bpage, "Joined")
	require.Contains(t, bpage, "1 completed")
	require.Contains(t, bpage, "1 failed")
	_, home = getPage(t, "GET", base+"/", sess, "")
	require.Contains(t, home, `href="/batches/`+bid+`"`, "members link to their batch")

	resp, _ = getPage(t, "GET", base+"/static/htmx.min.js", "", "")
	require.Equal(t, http.StatusOK, resp.StatusCode)

	// asynqmon: the admin only.
	resp, _ = getPage(t, "GET", base+"/monitoring/", "", "ka")
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	resp, _ = getPage(t, "GET", base+"/monitoring/", "", "")
	require.Equal(t, http.StatusSeeOther, resp.StatusCode, "signed out: the sign-in page")
	resp, mon := getPage(t, "GET", base+"/monitoring/", "", "adm")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, strings.ToLower(mon), "<html")

	// Another site's page cannot post the sign-in form (with a key it chose,
	// so the user would go on under its agent) nor sign the user out; the
	// console's own page can, as can a client that is no browser.
	for _, h := range []map[string]string{{"Origin": "http://evil.example"}, {"Origin": "null", "Sec-Fetch-Site": "cross-site"},
		{"Sec-Fetch-Site": "cross-site"}, {"Origin": base, "Sec-Fetch-Site": "same-site"}} {
		for _, path := range []string{"/login", "/logout"} {
			req, err := http.NewRequest("POST", base+path, strings.NewReader(url.Values{"key": {"ka"}}.Encode()))
			require.NoError(t, err)
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.AddCookie(&http.Cookie{Name: "bgjobs_session", Value: sess})
			for k, v := range h {
				req.Header.Set(k, v)
			}
			r, err := noClient.Do(req)
			require.NoError(t, err)
			var e struct {
				Error struct{ Code, Message string }
			}
			require.NoError(t, json.NewDecoder(r.Body).Decode(&e), "%s from %v: a JSON error", path, h)
			r.Body.Close()
			require.Equal(t, http.StatusForbidden, r.StatusCode, "%s from %v", path, h)
			require.Equal(t, "forbidden", e.Error.Code)
			require.Empty(t, r.Cookies(), "%s from %v sets no cookie", path, h)
		}
	}
	resp, _ = getPage(t, "GET", base+"/", sess, "")
	require.Equal(t, http.StatusOK, resp.StatusCode, "still signed in")
	req, err := http.NewRequest("POST", base+"/login", strings.NewReader(url.Values{"key": {"ka"}}.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "null") // the browser's, under the console's no-referrer policy
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	own, err := noClient.Do(req)
	require.NoError(t, err)
	own.Body.Close()
	require.Equal(t, http.StatusSeeOther, own.StatusCode, "the sign-in page's own form")

	// Signing out ends the sign-in on the server: a copy of its cookie,
	// kept by whoever took it, signs nobody in any more; another sign-in
	// of the same key is its own and goes on.
	other := signIn(t, base, "ka")
	resp, _ = getPage(t, "GET", base+"/v1/jobs", sess, "")
	require.Equal(t, http.StatusOK, resp.StatusCode, "the API's reads take the cookie too (EventSource)")
	resp, _ = getPage(t, "POST", base+"/logout", sess, "")
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	resp, _ = getPage(t, "GET", base+"/", sess, "")
	require.Equal(t, http.StatusSeeOther, resp.StatusCode, "signed out")
	resp, _ = getPage(t, "GET", base+"/v1/jobs", sess, "")
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	resp, _ = getPage(t, "GET", base+"/", other, "")
	require.Equal(t, http.StatusOK, resp.StatusCode, "the other sign-in stands")
}

// The console pages beyond the newest 100 and finds a job by id or text;
// its buttons work only from its own page (htmx, same origin), never for
// a cross-site form riding on the cookie.
func TestConsolePagingSearchAndActions(t *testing.T) {
	t.Parallel()
	base := startServe(t, map[string]string{"BGJOBS_API_KEYS": "alpha:ka", "BGJOBS_AUTO_RESUME": "false"})
	a := client{t: t, base: base, key: "ka"}
	sess := signIn(t, base, "ka")
	var ids []string
	for i := range 120 {
		_, j := a.do("POST", "/v1/jobs", map[string]any{"origin_session": "chat-p", "kind": "work", "description": fmt.Sprintf("Job number %03d", i),
			"work": map[string]any{"type": "echo", "args": map[string]any{"text": fmt.Sprintf("result %03d", i)}}})
		ids = append(ids, j["id"].(string))
	}
	a.waitStatus(ids[119], "completed")
	a.waitStatus(ids[0], "completed")

	rows := regexp.MustCompile(`<li id="job-`)
	_, home := getPage(t, "GET", base+"/", sess, "")
	require.Len(t, rows.FindAllString(home, -1), 100, "the newest 100")
	older := regexp.MustCompile(`class="button older" href="([^"]+)"`).FindStringSubmatch(home)
	require.NotNil(t, older, "a link to older jobs")
	_, page2 := getPage(t, "GET", base+html.UnescapeString(older[1]), sess, "")
	require.Len(t, rows.FindAllString(page2, -1), 20)
	require.Contains(t, page2, "Job number 000")

	_, found := getPage(t, "GET", base+"/?q="+ids[5], sess, "")
	require.Len(t, rows.FindAllString(found, -1), 1)
	require.Contains(t, found, "Job number 005")
	_, found = getPage(t, "GET", base+"/?q="+url.QueryEscape("result 01"), sess, "")
	require.Len(t, rows.FindAllString(found, -1), 10, "results 010–019 match by text")
	_, none := getPage(t, "GET", base+"/?q=zebra", sess, "")
	require.Contains(t, none, "No jobs match.")

	// A batch's page shows its members 100 at a time, each once.
	var members []any
	for i := range 230 {
		members = append(members, map[string]any{"kind": "work", "description": fmt.Sprintf("Member %03d", i),
			"work": map[string]any{"type": "echo", "args": map[string]any{"text": "m"}}})
	}
	_, bt := a.do("POST", "/v1/batches", map[string]any{"origin_session": "chat-m", "jobs": members})
	seen := map[string]bool{}
	next := "/batches/" + bt["batch_id"].(string)
	for _, want := range []int{100, 100, 30} {
		require.NotEmpty(t, next, "a link to more members")
		_, page := getPage(t, "GET", base+next, sess, "")
		got := regexp.MustCompile(`<li id="job-([^"]+)"`).FindAllStringSubmatch(page, -1)
		require.Len(t, got, want)
		for _, m := range got {
			require.False(t, seen[m[1]], "each member once")
			seen[m[1]] = true
		}
		require.Contains(t, page, fmt.Sprintf("members %d–%d of 230", len(seen)-want+1, len(seen)))
		next = ""
		if more := regexp.MustCompile(`class="button older" href="([^"]+)"`).FindStringSubmatch(page); more != nil {
			next = html.UnescapeString(more[1])
		}
	}
	require.Empty(t, next, "no link past the last member")
	require.Len(t, seen, 230)
	bad, said := getPage(t, "GET", base+"/batches/"+bt["batch_id"].(string)+"?from=230", sess, "")
	require.Equal(t, http.StatusBadRequest, bad.StatusCode)
	require.Contains(t, said, "a member's place in the batch, 0 to 229", "the page says what from takes")

	// The buttons: a cross-site form with the cookie is refused; the
	// console's own htmx request deletes.
	post := func(hdr map[string]string) int {
		req, _ := http.NewRequest("POST", base+"/console/jobs/"+ids[3]+"/delete", nil)
		req.AddCookie(&http.Cookie{Name: "bgjobs_session", Value: sess})
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := noClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.NotEqual(t, http.StatusOK, post(map[string]string{"Origin": "https://evil.example"}), "a cross-site form")
	require.NotEqual(t, http.StatusOK, post(map[string]string{"HX-Request": "true", "Origin": "https://evil.example"}), "another origin")
	code, _ := a.do("GET", "/v1/jobs/"+ids[3], nil)
	require.Equal(t, http.StatusOK, code, "nothing deleted")
	require.Equal(t, http.StatusOK, post(map[string]string{"HX-Request": "true", "Origin": base}))
	code, _ = a.do("GET", "/v1/jobs/"+ids[3], nil)
	require.Equal(t, http.StatusNotFound, code)

	// A missing job's page is HTML for a browser.
	req, _ := http.NewRequest("GET", base+"/jobs/bg-000000000000", nil)
	req.Header.Set("Accept", "text/html")
	req.AddCookie(&http.Cookie{Name: "bgjobs_session", Value: sess})
	resp, err := noClient.Do(req)
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	require.Contains(t, resp.Header.Get("Content-Type"), "text/html")
	require.Contains(t, string(b), "no job bg-000000000000")
}

package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bgjobs/bgjobs/internal/testenv"
)

func recall(c client, q string, extra ...string) map[string]any {
	c.t.Helper()
	v := url.Values{"q": {q}}
	for i := 0; i+1 < len(extra); i += 2 {
		v.Set(extra[i], extra[i+1])
	}
	code, res := c.do("GET", "/v1/recall?"+v.Encode(), nil)
	require.Equal(c.t, http.StatusOK, code, "%v", res)
	return res
}

// A 15,000-character turn report: the notification holds at most the cap
// plus the pointer, and recall finds it by a word unique to it right after
// the drain. A 15,000-character echo result drains whole.
func TestLongReportsAreCutWithAnHonestPointer(t *testing.T) {
	t.Parallel()
	a2aURL, _ := startAgent(t)
	c := client{t: t, base: startServe(t, map[string]string{"BGJOBS_AUTO_RESUME": "false"})}
	code, _ := c.do("PUT", "/v1/agents/default", map[string]any{"a2a_url": a2aURL})
	require.Equal(t, http.StatusOK, code)

	_, turn := c.do("POST", "/v1/jobs", map[string]any{"origin_session": "chat-m", "description": "Long research",
		"prompt": "[long 15000]\nzanzibarite deposits"})
	_, echo := c.do("POST", "/v1/jobs", map[string]any{"origin_session": "chat-m", "kind": "work", "description": "Big echo",
		"work": map[string]any{"type": "echo", "args": map[string]any{"text": strings.Repeat("e", 15000)}}})
	turnID, echoID := turn["id"].(string), echo["id"].(string)
	tj := c.waitStatus(turnID, "completed")
	require.Len(t, tj["result"], 15000)
	c.waitStatus(echoID, "completed")

	got := map[string]map[string]any{}
	testenv.Eventually(t, 15*time.Second, "both notifications", func() bool {
		_, d := c.do("POST", "/v1/sessions/chat-m/drain", nil)
		for _, n := range d["notifications"].([]any) {
			m := n.(map[string]any)
			got[m["job_id"].(string)] = m
		}
		return len(got) == 2
	})
	tn := got[turnID]
	require.Equal(t, true, tn["truncated"])
	text := tn["text"].(string)
	require.Contains(t, text, "<full-report>15000 characters; search it with memory_recall or open job "+turnID+".</full-report>")
	result := text[strings.Index(text, "<result>")+len("<result>") : strings.Index(text, "</result>")]
	require.LessOrEqual(t, len([]rune(result)), 2000)
	require.Greater(t, len([]rune(result)), 1000, "cut at a boundary near the cap, not far below")

	res := recall(c, "zanzibarite")
	hits := res["hits"].([]any)
	require.Len(t, hits, 1, "searchable right after the drain")
	h := hits[0].(map[string]any)
	require.Equal(t, turnID, h["job_id"])
	require.Equal(t, "chat-m", h["session"])
	require.Equal(t, "background_report", h["source_type"])
	require.Equal(t, 2.0, h["trust_tier"])
	require.Contains(t, h["heading"], "Long research ("+turnID+")")
	require.Contains(t, h["snippet"], "<mark>zanzibarite</mark>")

	en := got[echoID]
	require.Equal(t, false, en["truncated"])
	require.Contains(t, en["text"], "<result>"+strings.Repeat("e", 15000)+"</result>", "a deliverable is never cut")
}

// Agent B's recall never returns agent A's documents; an incognito report
// is never indexed; nothing is indexed under a background:* session.
func TestRecallIsolationAndWhatIsNeverIndexed(t *testing.T) {
	t.Parallel()
	a2aURL, _ := startAgent(t)
	base := startServe(t, map[string]string{"BGJOBS_API_KEYS": "alpha:ka,beta:kb", "BGJOBS_AUTO_RESUME": "false"})
	a, b := client{t: t, base: base, key: "ka"}, client{t: t, base: base, key: "kb"}
	for _, c := range []client{a, b} {
		code, _ := c.do("PUT", "/v1/agents/"+map[string]string{"ka": "alpha", "kb": "beta"}[c.key], map[string]any{"a2a_url": a2aURL})
		require.Equal(t, http.StatusOK, code)
	}
	spawn := func(c client, session, prompt string, incognito bool) string {
		_, j := c.do("POST", "/v1/jobs", map[string]any{"origin_session": session, "description": "r", "prompt": prompt, "incognito": incognito})
		id := j["id"].(string)
		c.waitStatus(id, "completed")
		return id
	}
	quokkas := spawn(a, "chat-1", "quokkas of alpha", false)
	spawn(a, "chat-1", "wombats incognito", true)
	spawn(a, "background:"+quokkas, "platypus worker", false)
	code, kn := a.do("POST", "/v1/knowledge", map[string]any{"session": "chat-1", "title": "Field notes", "text": "numbats are striped"})
	require.Equal(t, http.StatusCreated, code, "%v", kn)
	require.Regexp(t, `^kn-`, kn["doc_id"])
	testenv.Eventually(t, 10*time.Second, "alpha's report indexed", func() bool {
		return len(recall(a, "quokkas")["hits"].([]any)) == 1
	})
	require.Len(t, recall(a, "numbats")["hits"], 1, "knowledge is searchable when the POST returns")

	for _, q := range []string{"quokkas", "numbats", `"quokkas of alpha"`, "agent:alpha quokkas", "session:chat-1"} {
		for _, extra := range [][]string{nil, {"session", "chat-1"}} {
			res := recall(b, q, extra...)
			require.Empty(t, res["hits"], "beta must not see alpha's documents: %q %v", q, extra)
		}
	}
	require.Empty(t, recall(a, "wombats")["hits"], "an incognito report is never indexed")
	require.Empty(t, recall(a, "platypus")["hits"], "a background worker's own session is never indexed")

	code, e := a.do("GET", "/v1/recall?q=%22unclosed", nil)
	require.Equal(t, http.StatusBadRequest, code)
	require.Equal(t, "q", e["error"].(map[string]any)["field"])
	code, _ = a.do("POST", "/v1/knowledge", map[string]any{"session": "chat-1", "text": strings.Repeat("x", 64<<10+1)})
	require.Equal(t, http.StatusRequestEntityTooLarge, code)
}

// delegate sends a message to another registered agent; its reply is the
// deliverable, whole.
func TestDelegateDeliversTheReplyWhole(t *testing.T) {
	t.Parallel()
	a2aURL, log := startAgent(t)
	c := client{t: t, base: startServe(t, map[string]string{"BGJOBS_AUTO_RESUME": "false"})}
	code, _ := c.do("PUT", "/v1/agents/helper", map[string]any{"a2a_url": a2aURL})
	require.Equal(t, http.StatusOK, code)
	_, j := c.do("POST", "/v1/jobs", map[string]any{"origin_session": "chat-d", "kind": "work", "description": "Ask helper",
		"work": map[string]any{"type": "delegate", "args": map[string]any{"agent": "helper", "message": "[long 9000]\nsummarise the ledger"}}})
	id := j["id"].(string)
	done := c.waitStatus(id, "completed")
	require.Len(t, done["result"], 9000)
	require.Contains(t, log.String(), "summarise the ledger")
	_, d := c.do("POST", "/v1/sessions/chat-d/drain", nil)
	n := d["notifications"].([]any)[0].(map[string]any)
	require.Equal(t, false, n["truncated"])
	require.Contains(t, n["text"], done["result"])
}

// A URL becomes an ingest job: fetched (a trusted loopback host through the
// allow-list), turned into text and indexed as "ingest", trust tier 3. A
// loopback URL that is not allowed reaches nothing.
func TestKnowledgeFromAURL(t *testing.T) {
	t.Parallel()
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, `<html><head><title>Axolotl care</title><style>p{}</style></head><body><h1>Care</h1><p>Axolotls regenerate limbs.</p><script>alert(1)</script></body></html>`)
	}))
	defer page.Close()
	var canaryHits atomic.Int64
	canary := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { canaryHits.Add(1) }))
	defer canary.Close()
	c := client{t: t, base: startServe(t, map[string]string{"BGJOBS_FETCH_ALLOW": strings.TrimPrefix(page.URL, "http://"), "BGJOBS_AUTO_RESUME": "false"})}

	code, j := c.do("POST", "/v1/knowledge", map[string]any{"session": "chat-k", "url": page.URL + "/care"})
	require.Equal(t, http.StatusAccepted, code, "%v", j)
	done := c.waitStatus(j["id"].(string), "completed")
	require.Contains(t, done["result"], `Ingested "Axolotl care"`)
	var hits []any
	testenv.Eventually(t, 10*time.Second, "the page to be searchable", func() bool {
		hits = recall(c, "regenerate", "source_type", "ingest")["hits"].([]any)
		return len(hits) == 1
	})
	h := hits[0].(map[string]any)
	require.Equal(t, 3.0, h["trust_tier"])
	require.Equal(t, "Axolotl care", h["heading"])
	require.Empty(t, recall(c, "alert")["hits"], "script text is not indexed")

	// A literal internal address is refused at once; a name that resolves
	// to one fails its job at the dial. Neither reaches the canary.
	code, bad := c.do("POST", "/v1/knowledge", map[string]any{"session": "chat-k", "url": canary.URL + "/secret"})
	require.Equal(t, http.StatusBadRequest, code, "%v", bad)
	require.Equal(t, "url", bad["error"].(map[string]any)["field"])
	require.Contains(t, bad["error"].(map[string]any)["message"], "BGJOBS_FETCH_ALLOW")
	code, bad = c.do("POST", "/v1/knowledge", map[string]any{"session": "chat-k", "url": strings.Replace(canary.URL, "127.0.0.1", "localhost", 1) + "/secret"})
	require.Equal(t, http.StatusAccepted, code, "%v", bad)
	failed := c.waitStatus(bad["id"].(string), "failed")
	require.Contains(t, failed["error"], "not allowed")
	require.Zero(t, canaryHits.Load())
}

// Several texts in one POST /v1/knowledge: every one is searchable when the
// answer comes, under the ids it lists in order; one bad text refuses the
// whole request, names it, and leaves nothing indexed.
func TestKnowledgeDocumentsIndexTogether(t *testing.T) {
	t.Parallel()
	c := client{t: t, base: startServe(t, map[string]string{"BGJOBS_AUTO_RESUME": "false"})}
	words := []string{"quollfinch", "dunnartelle", "bilbymoth"}
	docs := make([]map[string]any, len(words))
	for i, w := range words {
		docs[i] = map[string]any{"title": fmt.Sprint("Field note ", i), "text": "field notes on the " + w + " of the dry country"}
	}
	docs[2]["text"] = strings.Repeat("filler prose about the outback. ", 600) + "the bilbymoth at last" // passages
	code, res := c.do("POST", "/v1/knowledge", map[string]any{"session": "chat-kd", "documents": docs})
	require.Equal(t, http.StatusCreated, code, "%v", res)
	ids := res["doc_ids"].([]any)
	require.Len(t, ids, len(words))
	require.Greater(t, res["passages"], float64(len(words)), "the long text is cut into passages")
	for i, w := range words {
		hits := recall(c, w)["hits"].([]any)
		require.Len(t, hits, 1, "%s searchable when the POST returns", w)
		h := hits[0].(map[string]any)
		require.True(t, strings.HasPrefix(h["doc_id"].(string), ids[i].(string)), "%s is under its own id: %v, %v", w, h["doc_id"], ids[i])
		require.True(t, strings.HasPrefix(h["heading"].(string), fmt.Sprint("Field note ", i)), "%v", h["heading"])
		require.Equal(t, "chat-kd", h["session"])
	}

	refused := func(body map[string]any, status int, field string) {
		t.Helper()
		code, e := c.do("POST", "/v1/knowledge", body)
		require.Equal(t, status, code, "%v", e)
		require.Equal(t, field, e["error"].(map[string]any)["field"], "%v", e)
	}
	one := func(text string) map[string]any { return map[string]any{"text": text} }
	refused(map[string]any{"session": "chat-kd", "documents": []any{one("wallabyfern ok"), one("  ")}}, http.StatusBadRequest, "documents[1].text")
	refused(map[string]any{"session": "chat-kd", "documents": []any{one("wallabyfern ok"), one(strings.Repeat("x", 64<<10+1))}},
		http.StatusRequestEntityTooLarge, "documents[1].text")
	refused(map[string]any{"session": "chat-kd", "text": "wallabyfern", "documents": []any{one("wallabyfern ok")}}, http.StatusBadRequest, "documents")
	refused(map[string]any{"session": "chat-kd", "url": "https://example.org", "documents": []any{one("wallabyfern ok")}}, http.StatusBadRequest, "documents")
	many := make([]any, 101)
	for i := range many {
		many[i] = one("wallabyfern")
	}
	refused(map[string]any{"session": "chat-kd", "documents": many}, http.StatusBadRequest, "documents")
	refused(map[string]any{"session": "chat-kd", "documents": []any{map[string]any{"text": "wallabyfern", "tags": "x"}}}, http.StatusBadRequest, "tags")
	require.Empty(t, recall(c, "wallabyfern")["hits"], "a refused request indexes none of its texts")
}

// On the embedded Redis the reports stream dies with the process, so its
// index does too: recall answers while serve runs, nothing is written under
// BGJOBS_DATA_DIR, and the index's temporary directory is gone after.
func TestEmbeddedRedisKeepsItsIndexOutOfTheDataDir(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	var indexDir string
	t.Cleanup(func() { // runs after serve has stopped (cleanups run last first)
		require.NotEmpty(t, indexDir)
		_, err := os.Stat(indexDir)
		require.True(t, os.IsNotExist(err), "the temporary index outlived serve: %v", err)
	})
	base, out := startServeLogged(t, map[string]string{"REDIS_URL": "", "BGJOBS_DATA_DIR": dataDir, "BGJOBS_API_KEYS": "alpha:ka"})
	a := client{t: t, base: base, key: "ka"}
	code, kn := a.do("POST", "/v1/knowledge", map[string]any{"session": "chat-1", "title": "Field notes", "text": "echidnas lay eggs"})
	require.Equal(t, http.StatusCreated, code, "%v", kn)
	require.Len(t, recall(a, "echidnas")["hits"], 1)

	m := regexp.MustCompile(`"search index is new[^"]*","dir":"([^"]+)"`).FindStringSubmatch(out.String())
	require.NotNil(t, m, "serve says where its index is: %s", out.String())
	indexDir = m[1]
	require.True(t, strings.HasPrefix(indexDir, os.TempDir()), indexDir)
	entries, err := os.ReadDir(dataDir)
	require.NoError(t, err)
	require.Empty(t, entries, "nothing under BGJOBS_DATA_DIR")
}

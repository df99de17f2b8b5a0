package handlers

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/bgjobs/bgjobs/handlers/openapi"
	"github.com/bgjobs/bgjobs/internal/testenv"
)

// obj is a JSON object of the document.
type obj = map[string]any

var echoParam = regexp.MustCompile(`:([a-z_]+)`)

// Every registered route is documented in /openapi.json, and every
// documented path is routed.
func TestOpenAPICoversEveryRoute(t *testing.T) {
	t.Parallel()
	b := setup(t)
	e := NewServer(b.cfg, Deps{Manager: b.m, Metrics: http.NotFoundHandler(), MCP: http.NotFoundHandler(), Monitoring: http.NotFoundHandler()}).(*echo.Echo)
	doc := openapi.Document()
	paths := doc["paths"].(obj)

	documented := map[string]bool{}
	for p, item := range paths {
		for method := range item.(obj) {
			documented[strings.ToUpper(method)+" "+p] = true
		}
	}
	routed := map[string]bool{}
	for _, r := range e.Routes() {
		if strings.HasPrefix(r.Path, "/*") || r.Method == "echo_route_not_found" {
			continue
		}
		path := echoParam.ReplaceAllString(r.Path, "{$1}")
		if strings.HasSuffix(path, "/*") && path != "/v1/sessions/*" {
			path = strings.TrimSuffix(path, "*") + "{path}"
		}
		routed[r.Method+" "+path] = true
	}
	var missing []string
	for key := range routed {
		if strings.HasSuffix(key, "/v1/sessions/*") {
			continue // session actions, checked below
		}
		if !documented[key] {
			missing = append(missing, key)
		}
	}
	sort.Strings(missing)
	require.Empty(t, missing, "routed but not documented")
	var ghosts []string
	for key := range documented {
		if strings.HasPrefix(key, "POST /v1/sessions/{session}/") && routed["POST /v1/sessions/*"] {
			continue
		}
		if !routed[key] {
			ghosts = append(ghosts, key)
		}
	}
	sort.Strings(ghosts)
	require.Empty(t, ghosts, "documented but not routed")

	// And the session actions the wildcard serves are exactly the documented ones.
	for _, action := range []string{"drain", "busy", "idle"} {
		require.True(t, documented["POST /v1/sessions/{session}/"+action], action)
	}
	code, body := b.do(t, "GET", "/openapi.json", "", nil)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "3.0.3", body["openapi"])
}

// The repository's API reference (docs/api.md) names every path
// /openapi.json documents, so the two stay in step.
func TestAPIReferenceNamesEveryPath(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../docs/api.md")
	require.NoError(t, err)
	doc := string(raw)
	var missing []string
	for path := range openapi.Document()["paths"].(map[string]any) {
		if !strings.Contains(doc, "`"+path) && !strings.Contains(doc, " "+path) {
			missing = append(missing, path)
		}
	}
	sort.Strings(missing)
	require.Empty(t, missing, "paths in /openapi.json that docs/api.md does not name")
}

// Sign-in sends the browser back where it came from, on this server only:
// every spelling a browser would read as another host goes to "/".
func TestLocalPath(t *testing.T) {
	for next, want := range map[string]string{
		"/jobs/bg-0123456789ab": "/jobs/bg-0123456789ab",
		"/monitoring/":          "/monitoring/",
		"/?agent=alpha&q=fuel":  "/?agent=alpha&q=fuel",
		"":                      "/",
		"jobs":                  "/",
		"//evil.example/x":      "/",
		"/\\evil.example":       "/",
		"/\t/evil.example":      "/",
		"/\n/evil.example":      "/",
		"https://evil.example/": "/",
		"/%5Cevil.example":      "/%5Cevil.example", // a path segment, not a host: the browser keeps it escaped
		"\\\\evil.example":      "/",
		"javascript:alert(1)":   "/",
	} {
		require.Equal(t, want, localPath(next), "%q", next)
	}
}

// /openapi.json is a valid OpenAPI 3 document by a validator's reading, and
// the API's real answers (each status a client meets on the common calls)
// match the schemas it gives them: a client generated from it decodes
// what the server sends.
func TestOpenAPIDocumentIsValidAndMatchesAnswers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := b.m.NewWorker()
	require.NoError(t, w.Start(context.Background()))
	t.Cleanup(w.Shutdown)
	ctx := context.Background()

	resp, err := http.Get(b.srv.URL + "/openapi.json")
	require.NoError(t, err)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	doc, err := openapi3.NewLoader().LoadFromData(raw)
	require.NoError(t, err)
	require.NoError(t, doc.Validate(ctx))
	router, err := gorillamux.NewRouter(doc)
	require.NoError(t, err)

	call := func(method, path, body string, wantStatus int) map[string]any {
		t.Helper()
		req, err := http.NewRequest(method, b.srv.URL+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer key-a")
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, wantStatus, resp.StatusCode, "%s %s: %s", method, path, raw)
		route, params, err := router.FindRoute(req)
		require.NoError(t, err, "%s %s is documented", method, path)
		in := &openapi3filter.ResponseValidationInput{
			RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route},
			Status:                 resp.StatusCode, Header: resp.Header,
			Options: &openapi3filter.Options{IncludeResponseStatus: true},
		}
		in.SetBodyBytes(raw)
		require.NoError(t, openapi3filter.ValidateResponse(ctx, in), "%s %s answered %d: %s", method, path, resp.StatusCode, raw)
		var out map[string]any
		_ = json.Unmarshal(raw, &out)
		return out
	}
	echo := `{"origin_session":"s-oa","kind":"work","work":{"type":"echo","args":{"text":"hi"}}`
	call("PUT", "/v1/agents/alpha", `{"resume":"none","subagent_types":{"r":"You research."}}`, 200)
	call("GET", "/v1/agents/alpha", "", 200)
	spawned := call("POST", "/v1/jobs", echo+`}`, 202)
	done := call("POST", "/v1/jobs", echo+`,"wait_ms":10000}`, 200)
	require.Equal(t, "completed", done["status"])
	id := done["id"].(string)
	call("GET", "/v1/jobs/"+id, "", 200)
	call("GET", "/v1/jobs?session=s-oa&limit=1", "", 200)
	call("POST", "/v1/jobs/"+id+"/ack", "", 200)
	call("POST", "/v1/jobs/"+id+"/cancel", "", 409)
	call("GET", "/v1/jobs/bg-000000000000", "", 404)
	call("GET", "/v1/jobs/nope", "", 400)
	batch := call("POST", "/v1/batches", `{"origin_session":"s-oa","jobs":[{"kind":"work","work":{"type":"echo"}},{"kind":"work","work":{"type":"nope"}}]}`, 202)
	call("GET", "/v1/batches/"+batch["batch_id"].(string), "", 200)
	call("POST", "/v1/sessions/s-oa/busy", `{"ttl_s":30}`, 200)
	call("POST", "/v1/sessions/s-oa/idle", "", 200)
	testenv.Eventually(t, 15*time.Second, "the spawned job to end", func() bool {
		j, err := b.m.Get(ctx, "alpha", spawned["id"].(string))
		return err == nil && j.Status.Terminal()
	})
	call("POST", "/v1/sessions/s-oa/drain", "", 200)
	call("DELETE", "/v1/jobs/"+id, "", 204)
}

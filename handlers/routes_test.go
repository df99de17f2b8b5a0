package handlers

import (
	"net/http"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/bgjobs/bgjobs/handlers/openapi"
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

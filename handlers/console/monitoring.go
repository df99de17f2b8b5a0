package console

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/bgjobs/bgjobs/tasks"
)

// MonitoringHeaders gives asynqmon a policy of its own: its page bootstraps
// with two inline scripts, allowed by their hashes (nothing else inline
// runs), and its UI library injects styles.
func MonitoringHeaders(asynqmon http.Handler) echo.MiddlewareFunc {
	csp := "default-src 'self'; script-src 'self'" + inlineScriptHashes(asynqmon, "/monitoring/") +
		"; style-src 'self' 'unsafe-inline'; img-src 'self' data:; font-src 'self' data:; connect-src 'self'; " +
		"object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			c.Response().Header().Set("Content-Security-Policy", csp)
			return next(c)
		}
	}
}

// MonitoringWakes tells the workers when asynqmon changed one of bgjobs'
// queues (a task run now, a queue resumed, tasks moved back): asynq's
// tools announce nothing, so a worker holding an empty fetch would find
// the task only when its hold ran out. Its API names the queue first:
// /monitoring/api/queues/<queue>/… or /monitoring/api/queues/<queue>:resume.
func MonitoringWakes(m *tasks.Manager) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			err := next(c)
			r := c.Request()
			rest, api := strings.CutPrefix(r.URL.Path, "/monitoring/api/queues/")
			if !api || r.Method == http.MethodGet || r.Method == http.MethodHead || c.Response().Status >= 300 {
				return err
			}
			for _, q := range m.Queues() {
				if after, ok := strings.CutPrefix(rest, q); ok && (after == "" || after[0] == '/' || after[0] == ':') {
					m.WakeQueue(q)
				}
			}
			return err
		}
	}
}

var inlineScript = regexp.MustCompile(`(?s)<script>(.*?)</script>`)

// inlineScriptHashes renders page once and returns a CSP source
// (" 'sha256-…'") for each of its inline scripts.
func inlineScriptHashes(h http.Handler, page string) string {
	rec := &pageRecorder{header: http.Header{}}
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, page, nil))
	var out strings.Builder
	for _, m := range inlineScript.FindAllSubmatch(rec.body.Bytes(), -1) {
		sum := sha256.Sum256(m[1])
		out.WriteString(" 'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'")
	}
	return out.String()
}

// pageRecorder keeps what a handler writes.
type pageRecorder struct {
	header http.Header
	body   bytes.Buffer
}

func (r *pageRecorder) Header() http.Header         { return r.header }
func (r *pageRecorder) Write(b []byte) (int, error) { return r.body.Write(b) }
func (r *pageRecorder) WriteHeader(int)             {}

package handlers

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/search"
	"github.com/bgjobs/bgjobs/tasks"
	"github.com/bgjobs/bgjobs/web"
)

// keyCookie carries a signed-in console user's key: HttpOnly (no script
// reads it) and SameSite=Strict (no other site sends it).
const keyCookie = "bgjobs_key"

// pageData is what every console page shows in its header.
type pageData struct {
	Title    string
	Agent    string
	Admin    bool
	Running  int
	Session  string
	Status   string
	Statuses []string
	Jobs     []*bgjobs.Job
	Job      *bgjobs.Job
	Query    string
	Result   *search.RecallResult
	Batch    *bgjobs.Batch
	Error    string
	// Next is where the sign-in form goes on to.
	Next string
}

// securityHeaders sets the console's headers on every page and asset.
func securityHeaders(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		web.SecurityHeaders(c.Response().Header())
		return next(c)
	}
}

// pageAuth admits a console request by its Authorization header or its
// sign-in cookie; anyone else is sent to the sign-in page.
func (a *authenticator) pageAuth(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if a.open {
			setCaller(c, caller{agent: OpenAgent, admin: true})
			return next(c)
		}
		who, ok, err := a.lookup(c.Request().Context(), credential(c))
		if err != nil {
			return err
		}
		if !ok {
			if strings.HasPrefix(c.Request().URL.Path, "/monitoring") && c.Request().Header.Get("Authorization") != "" {
				return bgjobs.Errorf(bgjobs.EUnauthenticated, "the dashboard needs the admin key")
			}
			return c.Redirect(http.StatusSeeOther, "/login?next="+url.QueryEscape(c.Request().URL.Path))
		}
		if as := c.QueryParam("agent"); as != "" && who.admin && bgjobs.ValidAgentName(as) {
			who.agent = as
		}
		setCaller(c, who)
		return next(c)
	}
}

func handleLoginPage() echo.HandlerFunc {
	return func(c echo.Context) error {
		return renderPage(c, "login", pageData{Title: "Sign in", Next: c.QueryParam("next")})
	}
}

func handleLogin(a *authenticator) echo.HandlerFunc {
	return func(c echo.Context) error {
		key := strings.TrimSpace(c.FormValue("key"))
		_, ok, err := a.lookup(c.Request().Context(), key)
		if err != nil {
			return err
		}
		if !ok {
			c.Response().WriteHeader(http.StatusUnauthorized)
			return web.Render(c.Response(), "login", pageData{Title: "Sign in", Error: "Unknown key.", Next: c.QueryParam("next")})
		}
		c.SetCookie(&http.Cookie{Name: keyCookie, Value: key, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode,
			Secure: c.Scheme() == "https", MaxAge: int((7 * 24 * time.Hour).Seconds())})
		next := c.QueryParam("next")
		if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") {
			next = "/"
		}
		return c.Redirect(http.StatusSeeOther, next)
	}
}

func handleLogout() echo.HandlerFunc {
	return func(c echo.Context) error {
		c.SetCookie(&http.Cookie{Name: keyCookie, Value: "", Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode, MaxAge: -1})
		return c.Redirect(http.StatusSeeOther, "/login")
	}
}

func renderPage(c echo.Context, name string, d pageData) error {
	c.Response().Header().Set(echo.HeaderContentType, echo.MIMETextHTMLCharsetUTF8)
	return web.Render(c.Response(), name, d)
}

// consoleData loads the caller's header and job list.
func consoleData(c echo.Context, m *tasks.Manager, title string) (pageData, error) {
	who, _ := c.Get(callerKey).(caller)
	d := pageData{Title: title, Agent: who.agent, Admin: who.admin, Session: c.QueryParam("session"), Status: c.QueryParam("status"),
		Statuses: []string{"queued", "running", "completed", "failed", "cancelled"}}
	if who.agent == "" {
		return d, nil
	}
	jobs, _, err := m.List(c.Request().Context(), tasks.ListRequest{Agent: who.agent, Session: d.Session, Status: d.Status,
		Limit: 100, WithResults: true})
	if err != nil {
		return d, err
	}
	for _, j := range jobs {
		if !j.Status.Terminal() {
			d.Running++
		}
	}
	d.Jobs = jobs
	return d, nil
}

func handleConsole(m *tasks.Manager) echo.HandlerFunc {
	return func(c echo.Context) error {
		d, err := consoleData(c, m, "Jobs")
		if err != nil {
			return err
		}
		return renderPage(c, "home", d)
	}
}

func handleConsoleJobs(m *tasks.Manager) echo.HandlerFunc {
	return func(c echo.Context) error {
		d, err := consoleData(c, m, "Jobs")
		if err != nil {
			return err
		}
		return renderPage(c, "joblist", d)
	}
}

func handleViewer(m *tasks.Manager) echo.HandlerFunc {
	return func(c echo.Context) error {
		d, err := consoleData(c, m, "Report")
		if err != nil {
			return err
		}
		j, err := m.Get(c.Request().Context(), d.Agent, c.Param("id"))
		if err != nil {
			return err
		}
		d.Job, d.Title = j, j.Description
		return renderPage(c, "viewer", d)
	}
}

func handleBatchPage(m *tasks.Manager) echo.HandlerFunc {
	return func(c echo.Context) error {
		d, err := consoleData(c, m, "Batch")
		if err != nil {
			return err
		}
		b, err := m.GetBatch(c.Request().Context(), d.Agent, c.Param("id"))
		if err != nil {
			return err
		}
		d.Batch = b
		return renderPage(c, "batch", d)
	}
}

func handleMemoryPage(m *tasks.Manager, mem Memory) echo.HandlerFunc {
	return func(c echo.Context) error {
		d, err := consoleData(c, m, "Memory")
		if err != nil {
			return err
		}
		d.Query = c.QueryParam("q")
		if d.Query != "" {
			if mem == nil {
				d.Error = "This server has no search index."
			} else if res, err := mem.Recall(c.Request().Context(), search.RecallRequest{Agent: d.Agent, Query: d.Query, Limit: 50}); err != nil {
				d.Error = err.Error()
			} else {
				d.Result = res
			}
		}
		return renderPage(c, "memory", d)
	}
}

// adminOnly lets the admin key through, and nobody else.
func adminOnly(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if who, _ := c.Get(callerKey).(caller); !who.admin {
			if strings.Contains(c.Request().Header.Get("Accept"), "text/html") {
				// A person: a page that says why, with the way in.
				c.Response().WriteHeader(http.StatusUnauthorized)
				return renderPage(c, "refused", pageData{Title: "Admin only", Error: "The queue dashboard needs the admin key."})
			}
			return bgjobs.Errorf(bgjobs.EUnauthenticated, "the dashboard needs the admin key")
		}
		return next(c)
	}
}

// monitoringHeaders gives asynqmon a policy of its own: its page bootstraps
// with two inline scripts, allowed by their hashes (nothing else inline
// runs), and its UI library injects styles.
func monitoringHeaders(asynqmon http.Handler) echo.MiddlewareFunc {
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

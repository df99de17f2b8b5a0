// Package console is bgjobs' web console for people: the job list (live,
// paged, searchable, per agent for the admin), a job's report, a batch,
// memory search, and the buttons that cancel, retry and delete. It renders
// the web package's templates; who the caller is comes from the API's auth.
package console

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/search"
	"github.com/bgjobs/bgjobs/tasks"
	"github.com/bgjobs/bgjobs/web"
)

// Who tells the console whom a request is from: the agent it acts for
// ("" for an admin key that named none) and whether it holds the admin key.
type Who func(echo.Context) (agent string, admin bool)

// Recaller searches an agent's memory.
type Recaller interface {
	Recall(ctx context.Context, r search.RecallRequest) (*search.RecallResult, error)
}

// Console serves the pages.
type Console struct {
	m   *tasks.Manager
	mem Recaller
	who Who
}

// New returns the console on m; mem may be nil (no search index).
func New(m *tasks.Manager, mem Recaller, who Who) *Console {
	return &Console{m: m, mem: mem, who: who}
}

// Page is what a console page shows.
type Page struct {
	Title string
	Agent string
	Admin bool
	// As keeps the admin's chosen agent in links ("?agent=…"), or "".
	As      string
	Agents  []string
	Queued  int
	Running int
	Session string
	Status  string
	// Cursor is the page's own cursor; OlderURL the next page's link.
	Cursor   string
	OlderURL string
	Statuses []string
	Rows     []Row
	// Scanned is how many jobs a text search read.
	Scanned int
	Job     *bgjobs.Job
	Query   string
	Result  *search.RecallResult
	Batch   *bgjobs.Batch
	// Members says which of a batch's members the page shows ("101–200"),
	// when it shows fewer than all.
	Members string
	Error   string
	// Next is where the sign-in form goes on to.
	Next string
}

// Row is one job row, with the agent the page acts as.
type Row struct {
	J  *bgjobs.Job
	As string
}

// Render writes a page or fragment as HTML.
func Render(c echo.Context, name string, d any) error {
	c.Response().Header().Set(echo.HeaderContentType, echo.MIMETextHTMLCharsetUTF8)
	return web.Render(c.Response(), name, d)
}

// searchRows bounds how many jobs a text search reads.
const searchRows = 2000

// header fills what every page shows: the agent (the admin picks one:
// ?agent=, else the first with jobs) and, for the admin, the others.
func (cs *Console) header(c echo.Context, title string) (Page, error) {
	agent, admin := cs.who(c)
	d := Page{Title: title, Agent: agent, Admin: admin, Session: c.QueryParam("session"), Status: c.QueryParam("status"),
		Query: strings.TrimSpace(c.QueryParam("q")), Cursor: c.QueryParam("cursor"),
		Statuses: []string{"queued", "running", "completed", "failed", "cancelled"}}
	if !admin {
		return d, nil
	}
	agents, err := cs.m.Agents(c.Request().Context())
	if err != nil {
		return d, err
	}
	slices.Sort(agents)
	if d.Agent == "" && len(agents) > 0 {
		d.Agent = agents[0]
	}
	if d.Agent != "" && !slices.Contains(agents, d.Agent) {
		agents = append([]string{d.Agent}, agents...)
	}
	d.Agents = agents
	if d.Agent != "" {
		d.As = "?agent=" + url.QueryEscape(d.Agent)
	}
	return d, nil
}

// list loads a page of the agent's jobs: newest first, 100 a page, or
// those matching a search (an id, or text in the title, session, result or
// error, among the newest searchRows).
func (cs *Console) list(c echo.Context, d *Page) error {
	ctx := c.Request().Context()
	req := tasks.ListRequest{Agent: d.Agent, Session: d.Session, Status: d.Status, Limit: 100, Cursor: d.Cursor, WithResults: true}
	switch {
	case bgjobs.ValidJobID(d.Query):
		if j, err := cs.m.Get(ctx, d.Agent, d.Query); err == nil {
			d.addRows([]*bgjobs.Job{j})
		}
	case d.Query != "":
		needle := strings.ToLower(d.Query)
		req.Limit = tasks.ListLimitMax
		for d.Scanned < searchRows && len(d.Rows) < 100 {
			page, next, err := cs.m.List(ctx, req)
			if err != nil {
				return err
			}
			d.Scanned += len(page)
			for _, j := range page {
				if strings.Contains(strings.ToLower(j.Description+" "+j.OriginSession+" "+deref(j.Result)+" "+deref(j.Error)), needle) {
					d.addRows([]*bgjobs.Job{j})
				}
			}
			if next == "" {
				break
			}
			req.Cursor = next
		}
	default:
		page, next, err := cs.m.List(ctx, req)
		if err != nil {
			return err
		}
		d.addRows(page)
		if next != "" {
			q := url.Values{"cursor": {next}}
			for k, v := range map[string]string{"session": d.Session, "status": d.Status} {
				if v != "" {
					q.Set(k, v)
				}
			}
			if d.As != "" {
				q.Set("agent", d.Agent)
			}
			d.OlderURL = "/?" + q.Encode()
		}
	}
	return nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// addRows adds job rows and counts those in flight.
func (d *Page) addRows(jobs []*bgjobs.Job) {
	for _, j := range jobs {
		switch j.Status {
		case bgjobs.StatusQueued:
			d.Queued++
		case bgjobs.StatusRunning:
			d.Running++
		}
		d.Rows = append(d.Rows, Row{J: j, As: d.As})
	}
}

// Home is the job list.
func (cs *Console) Home(c echo.Context) error {
	d, err := cs.header(c, "Jobs")
	if err != nil {
		return err
	}
	if d.Agent != "" {
		if err := cs.list(c, &d); err != nil {
			return err
		}
	}
	return Render(c, "home", d)
}

// Row renders one job's row, for live updates.
func (cs *Console) Row(c echo.Context) error {
	d, err := cs.header(c, "Job")
	if err != nil {
		return err
	}
	j, err := cs.m.Get(c.Request().Context(), d.Agent, c.Param("id"))
	if err != nil {
		return err
	}
	return Render(c, "jobrow", Row{J: j, As: d.As})
}

// Action runs a row's button (cancel, retry, delete) under the API's rules
// and answers with the row as it now is (nothing once deleted). Origin
// admits only the console's own requests.
func (cs *Console) Action(c echo.Context) error {
	d, err := cs.header(c, "Job")
	if err != nil {
		return err
	}
	ctx, id := c.Request().Context(), c.Param("id")
	j, err := cs.m.Get(ctx, d.Agent, id)
	if err != nil {
		return err
	}
	switch c.Param("action") {
	case "cancel":
		j, err = cs.m.Cancel(ctx, d.Agent, id)
	case "retry":
		if j.Status == bgjobs.StatusCompleted {
			return bgjobs.Errorf(bgjobs.EConflict, "job %s completed; only failed or cancelled jobs are retried here", id)
		}
		j, err = cs.m.Retry(ctx, id, false)
	case "delete":
		if err := cs.m.Delete(ctx, d.Agent, id); err != nil {
			return err
		}
		return c.HTML(http.StatusOK, "")
	default:
		return bgjobs.Errorf(bgjobs.ENotFound, "no action %q", c.Param("action"))
	}
	if err != nil {
		return err
	}
	return Render(c, "jobrow", Row{J: j, As: d.As})
}

// Origin admits a console action only from the console itself: htmx marks
// its requests (HX-Request), which no other site can set without a CORS
// preflight bgjobs never grants, and the browser's Origin must be this
// host. With the SameSite=Strict cookie that makes the buttons CSRF-safe.
func Origin(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if !FromConsole(c.Request()) {
			return bgjobs.Errorf(bgjobs.EUnauthenticated, "console actions come from the console's own page")
		}
		return next(c)
	}
}

// FromConsole reports whether r is an htmx request from this origin.
func FromConsole(r *http.Request) bool {
	return r.Header.Get("HX-Request") == "true" && SameOrigin(r)
}

// SameOrigin reports whether the request's Origin names this server.
func SameOrigin(r *http.Request) bool {
	o, err := url.Parse(r.Header.Get("Origin"))
	return err == nil && o.Host != "" && o.Host == r.Host
}

// Viewer is a job's page: its details and its report, rendered.
func (cs *Console) Viewer(c echo.Context) error {
	d, err := cs.header(c, "Report")
	if err != nil {
		return err
	}
	j, err := cs.m.Get(c.Request().Context(), d.Agent, c.Param("id"))
	if err != nil {
		return err
	}
	d.Job, d.Title = j, j.Description
	d.addRows([]*bgjobs.Job{j})
	return Render(c, "viewer", d)
}

// batchPage is how many members a batch's page shows: a batch holds up to
// 1,000, and each row carries its report's excerpt (all at once, a page
// read every member's report whole and rendered a thousand of them).
const batchPage = 100

// Batch is a batch's page: its join state and its members' rows, batchPage
// at a time (?from=, the first member shown).
func (cs *Console) Batch(c echo.Context) error {
	d, err := cs.batchHeader(c)
	if err != nil {
		return err
	}
	from := 0
	if s := c.QueryParam("from"); s != "" {
		if from, err = strconv.Atoi(s); err != nil || from < 0 || from >= max(len(d.Batch.Jobs), 1) {
			return bgjobs.FieldError("from", "a member's place in the batch, 0 to %d", max(len(d.Batch.Jobs)-1, 0))
		}
	}
	to := min(from+batchPage, len(d.Batch.Jobs))
	js, err := cs.m.GetMany(c.Request().Context(), d.Agent, d.Batch.Jobs[from:to])
	if err != nil {
		return err
	}
	d.addRows(js)
	if from > 0 || to < len(d.Batch.Jobs) {
		d.Members = fmt.Sprintf("members %d–%d of %d", from+1, to, len(d.Batch.Jobs))
	}
	if to < len(d.Batch.Jobs) {
		q := url.Values{"from": {strconv.Itoa(to)}}
		if d.As != "" {
			q.Set("agent", d.Agent)
		}
		d.OlderURL = "/batches/" + d.Batch.ID + "?" + q.Encode()
	}
	return Render(c, "batch", d)
}

// BatchState renders a batch's join state, for live updates.
func (cs *Console) BatchState(c echo.Context) error {
	d, err := cs.batchHeader(c)
	if err != nil {
		return err
	}
	return Render(c, "batchstate", d)
}

func (cs *Console) batchHeader(c echo.Context) (Page, error) {
	d, err := cs.header(c, "Batch")
	if err != nil {
		return d, err
	}
	d.Batch, err = cs.m.GetBatch(c.Request().Context(), d.Agent, c.Param("id"))
	return d, err
}

// Memory is the memory search page.
func (cs *Console) Memory(c echo.Context) error {
	d, err := cs.header(c, "Memory")
	if err != nil {
		return err
	}
	d.Query = c.QueryParam("q")
	if d.Query != "" {
		if cs.mem == nil {
			d.Error = "This server has no search index."
		} else if res, err := cs.mem.Recall(c.Request().Context(), search.RecallRequest{Agent: d.Agent, Query: d.Query, Limit: 50}); err != nil {
			d.Error = err.Error()
		} else {
			d.Result = res
		}
	}
	return Render(c, "memory", d)
}

// AdminOnly lets the admin key through, and nobody else.
func (cs *Console) AdminOnly(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if _, admin := cs.who(c); !admin {
			if strings.Contains(c.Request().Header.Get("Accept"), "text/html") {
				// A person: a page that says why, with the way in.
				c.Response().WriteHeader(http.StatusUnauthorized)
				return Render(c, "refused", Page{Title: "Admin only", Error: "The queue dashboard needs the admin key."})
			}
			return bgjobs.Errorf(bgjobs.EUnauthenticated, "the dashboard needs the admin key")
		}
		return next(c)
	}
}

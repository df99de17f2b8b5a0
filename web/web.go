// Package web is the console: server-rendered pages (html/template, htmx
// with its SSE extension, all assets embedded) and markdown rendering that
// is sanitised before it reaches a page. It never calls Redis: the handlers
// hand it the data to show.
package web

import (
	"bytes"
	"embed"
	"html/template"
	"io"
	"io/fs"
	"net/http"
	"strings"
	"time"

	"github.com/microcosm-cc/bluemonday"
	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/extension"

	"github.com/bgjobs/bgjobs"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

var pages = template.Must(template.New("").Funcs(template.FuncMap{
	"since": func(t time.Time) string { return time.Since(t).Round(time.Second).String() },
	"rfc3339": func(t *time.Time) string {
		if t == nil {
			return ""
		}
		return t.UTC().Format(time.RFC3339)
	},
	"excerpt": func(s *string) string {
		if s == nil {
			return ""
		}
		return bgjobs.Excerpt(*s, 600)
	},
	"markdown": Markdown,
	"clock": func(v any) string {
		var t time.Time
		switch x := v.(type) {
		case time.Time:
			t = x
		case *time.Time:
			if x == nil {
				return ""
			}
			t = *x
		}
		return t.UTC().Format("Jan 2 15:04:05")
	},
	// duration is how long an ended job ran; "" for one that has not ended
	// (its live elapsed time is shown beside its status) or never started.
	"duration": func(j *bgjobs.Job) string {
		if j.StartedAt == nil || j.CompletedAt == nil {
			return ""
		}
		return j.CompletedAt.Sub(*j.StartedAt).Round(time.Millisecond).String()
	},
	"snippet": Snippet,
	"deref": func(s *string) string {
		if s == nil {
			return ""
		}
		return *s
	},
}).ParseFS(templateFS, "templates/*.html"))

// Render writes the named page or fragment.
func Render(w io.Writer, name string, data any) error {
	return pages.ExecuteTemplate(w, name, data)
}

// Static serves the embedded assets (htmx, its SSE extension, the
// console's script and styles).
func Static() http.Handler {
	sub, _ := fs.Sub(staticFS, "static")
	return http.FileServer(http.FS(sub))
}

var md = goldmark.New(goldmark.WithExtensions(extension.GFM))

// ugc is bluemonday's policy for user-generated content: formatting, links
// and images, nothing that runs.
var ugc = bluemonday.UGCPolicy()

// Markdown renders a report: goldmark first, then bluemonday's UGC policy,
// so whatever a report carries (script tags, on* handlers, javascript: or
// data: links, SVG, iframes) never runs in the viewer.
func Markdown(src string) template.HTML {
	var b bytes.Buffer
	if err := md.Convert([]byte(src), &b); err != nil {
		return template.HTML(template.HTMLEscapeString(src))
	}
	return template.HTML(ugc.SanitizeBytes(b.Bytes()))
}

// snippetPolicy keeps only the <mark> tags the search highlighter adds.
var snippetPolicy = bluemonday.NewPolicy().AllowElements("mark")

// Snippet shows a recall snippet with its highlights and nothing else.
func Snippet(s string) template.HTML {
	return template.HTML(snippetPolicy.Sanitize(strings.TrimSpace(s)))
}

// The security headers' values, built once: they go on every response,
// the API's included. Each slice is shared by all responses, which is safe
// because it is full (len == cap): Header.Add copies it, Header.Set
// replaces it.
var (
	cspValue = []string{"default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
		"connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"}
	nosniffValue  = []string{"nosniff"}
	denyValue     = []string{"DENY"}
	noReferrValue = []string{"no-referrer"}
)

// SecurityHeaders are set on every console page and asset: no inline
// script may run, no site may frame the console, no type sniffing.
func SecurityHeaders(h http.Header) {
	h["Content-Security-Policy"] = cspValue
	h["X-Content-Type-Options"] = nosniffValue
	h["X-Frame-Options"] = denyValue
	h["Referrer-Policy"] = noReferrValue
}

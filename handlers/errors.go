// Package handlers is the HTTP API: Echo routes (all in routes.go), auth,
// request decoding and validation, and the one error responder (its code
// table and shape are errshape's).
package handlers

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/handlers/console"
	"github.com/bgjobs/bgjobs/handlers/internal/errshape"
	"github.com/bgjobs/bgjobs/web"
)

// wantsPage reports whether a request is a browser's for a console page.
func wantsPage(r *http.Request) bool {
	p := r.URL.Path
	return r.Method == http.MethodGet && strings.Contains(r.Header.Get("Accept"), "text/html") && r.Header.Get("HX-Request") == "" &&
		!strings.HasPrefix(p, "/v1/") && p != "/mcp" && !strings.HasPrefix(p, "/monitoring/api/")
}

// errorHandler is Echo's HTTPErrorHandler: every error leaves as
// {"error": {...}} with the status of its code. Only internal errors are
// logged, with their detail; the client sees a generic message for those.
func errorHandler(log *slog.Logger) echo.HTTPErrorHandler {
	return func(err error, c echo.Context) {
		if c.Response().Committed {
			return
		}
		detail := errshape.Detail{Code: bgjobs.EInternal, Message: "internal error"}
		var be *bgjobs.Error
		var he *echo.HTTPError
		var ne net.Error
		switch {
		case errors.As(err, &be):
			detail = errshape.Detail{Code: be.Code, Message: be.Message, Field: be.Field}
		case errors.As(err, &ne):
			// A network error no layer below named (Redis went away mid
			// request): a retry may work, so a 503, never a 500.
			detail = errshape.Detail{Code: bgjobs.EUnavailable, Message: "temporarily unavailable; retry"}
		case errors.As(err, &he):
			code, ok := errshape.Code(he.Code)
			if !ok {
				code = bgjobs.EInternal
			}
			msg, _ := he.Message.(string)
			if msg == "" {
				msg = http.StatusText(he.Code)
			}
			if allow := c.Response().Header().Get(echo.HeaderAllow); he.Code == http.StatusMethodNotAllowed && allow != "" {
				msg = fmt.Sprintf("%s is not allowed here; this path takes %s", c.Request().Method, allow)
			}
			detail = errshape.Detail{Code: code, Message: msg}
		}
		status := errshape.Status(detail.Code)
		if status >= 500 {
			log.Error("request failed", slog.String("method", c.Request().Method),
				slog.String("path", c.Request().URL.Path), slog.Int("status", status), slog.Any("err", err))
			if detail.Code == bgjobs.EInternal {
				detail.Message = "internal error"
			}
		}
		if wait := errshape.RetryAfter(detail.Code); wait != "" {
			c.Response().Header().Set("Retry-After", wait)
		}
		if c.Request().Method == http.MethodHead {
			_ = c.NoContent(status)
			return
		}
		if wantsPage(c.Request()) {
			// A person at a console page gets a page, not JSON.
			c.Response().Header().Set(echo.HeaderContentType, echo.MIMETextHTMLCharsetUTF8)
			c.Response().WriteHeader(status)
			_ = web.Render(c.Response(), "error", console.Page{Title: http.StatusText(status), Error: detail.Message})
			return
		}
		_ = c.JSON(status, errshape.Body{Error: detail})
	}
}

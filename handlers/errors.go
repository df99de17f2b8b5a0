// Package handlers is the HTTP API: Echo routes (all in routes.go), auth,
// request decoding and validation, and the one error responder.
package handlers

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/handlers/console"
	"github.com/bgjobs/bgjobs/web"
)

// statusOf is the one table from error code to HTTP status.
var statusOf = map[string]int{
	bgjobs.EInvalid:          http.StatusBadRequest,
	bgjobs.EUnauthenticated:  http.StatusUnauthorized,
	bgjobs.ENotFound:         http.StatusNotFound,
	bgjobs.EMethodNotAllowed: http.StatusMethodNotAllowed,
	bgjobs.EConflict:         http.StatusConflict,
	bgjobs.ETooLarge:         http.StatusRequestEntityTooLarge,
	bgjobs.ERateLimited:      http.StatusTooManyRequests,
	bgjobs.EUnavailable:      http.StatusServiceUnavailable,
	bgjobs.EInternal:         http.StatusInternalServerError,
}

// codeOfStatus maps Echo's own errors (unknown route, wrong method) back to
// a code, so every error a client sees has the same JSON shape.
var codeOfStatus = map[int]string{
	http.StatusBadRequest:            bgjobs.EInvalid,
	http.StatusUnauthorized:          bgjobs.EUnauthenticated,
	http.StatusNotFound:              bgjobs.ENotFound,
	http.StatusMethodNotAllowed:      bgjobs.EMethodNotAllowed,
	http.StatusRequestEntityTooLarge: bgjobs.ETooLarge,
	http.StatusTooManyRequests:       bgjobs.ERateLimited,
	http.StatusServiceUnavailable:    bgjobs.EUnavailable,
}

type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
}

// errorHandler is Echo's HTTPErrorHandler: every error leaves as
// {"error": {...}} with the status of its code. Only internal errors are
// logged, with their detail; the client sees a generic message for those.
// wantsPage reports whether a request is a browser's for a console page.
func wantsPage(r *http.Request) bool {
	p := r.URL.Path
	return r.Method == http.MethodGet && strings.Contains(r.Header.Get("Accept"), "text/html") && r.Header.Get("HX-Request") == "" &&
		!strings.HasPrefix(p, "/v1/") && p != "/mcp" && !strings.HasPrefix(p, "/monitoring/api/")
}

func errorHandler(log *slog.Logger) echo.HTTPErrorHandler {
	return func(err error, c echo.Context) {
		if c.Response().Committed {
			return
		}
		detail := errorDetail{Code: bgjobs.EInternal, Message: "internal error"}
		var be *bgjobs.Error
		var he *echo.HTTPError
		switch {
		case errors.As(err, &be):
			detail = errorDetail{Code: be.Code, Message: be.Message, Field: be.Field}
		case errors.As(err, &he):
			code, ok := codeOfStatus[he.Code]
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
			detail = errorDetail{Code: code, Message: msg}
		}
		status, ok := statusOf[detail.Code]
		if !ok {
			status = http.StatusInternalServerError
		}
		if status >= 500 {
			log.Error("request failed", slog.String("method", c.Request().Method),
				slog.String("path", c.Request().URL.Path), slog.Int("status", status), slog.Any("err", err))
			if detail.Code == bgjobs.EInternal {
				detail.Message = "internal error"
			}
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
		_ = c.JSON(status, errorBody{Error: detail})
	}
}

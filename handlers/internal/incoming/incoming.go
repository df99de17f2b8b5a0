// Package incoming reads what a request brings: its body, within a size
// cap and a deadline, and its query string, strictly. Every failure is the
// API's 4xx error, never a 500.
package incoming

import (
	"errors"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/bgjobs/bgjobs"
)

// Body reads the request body, up to bgjobs.MaxBodyBytes.
func Body(c echo.Context) ([]byte, error) {
	body, err := io.ReadAll(http.MaxBytesReader(c.Response(), c.Request().Body, bgjobs.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		switch {
		case errors.As(err, &mbe):
			return nil, &bgjobs.Error{Code: bgjobs.ETooLarge, Message: "request body is over 1 MiB"}
		case errors.Is(err, os.ErrDeadlineExceeded):
			return nil, bgjobs.Errorf(bgjobs.EInvalid, "the request body did not arrive in time (its Content-Length is more than was sent?)")
		}
		return nil, bgjobs.Errorf(bgjobs.EInvalid, "reading the request body: %v", err)
	}
	return body, nil
}

// DefaultBodyTimeout is how long a request's body may take to arrive: a
// whole 1 MiB at 35 KB/s.
const DefaultBodyTimeout = 30 * time.Second

// BodyDeadline gives each request that has a body a read deadline, lifted
// once the body is read to its end. The server sets no ReadTimeout, which
// would also end what outlives its request's reading (event streams, MCP's
// stream, a spawn's wait_ms, a drain); without a deadline, a caller that
// sends its headers and then trickles or withholds the body held a
// goroutine and a connection for good.
func BodyDeadline(timeout time.Duration) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			r := c.Request()
			if r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0 {
				rc := http.NewResponseController(c.Response())
				if rc.SetReadDeadline(time.Now().Add(timeout)) == nil {
					r.Body = &deadlineBody{ReadCloser: r.Body, rc: rc}
				}
			}
			return next(c)
		}
	}
}

// deadlineBody lifts its connection's read deadline at the body's end:
// net/http then reads on, in the background, to notice a hang-up.
type deadlineBody struct {
	io.ReadCloser
	rc     *http.ResponseController
	lifted bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.lifted {
		b.lifted = true
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

// WatchHangup reads and drops a body the handler does not use. net/http
// notices a caller hanging up (and ends the request's context) only once
// the body is read to its end; a hand-over (drain, ack) must know when its
// caller is gone, to give back what it took.
func WatchHangup(c echo.Context) {
	_, _ = io.Copy(io.Discard, io.LimitReader(c.Request().Body, bgjobs.MaxBodyBytes))
}

// Query returns the request's query parameters, or a 400 when the query
// string is malformed (a bad %-escape, a ";" separator): Echo and net/url
// drop such a pair silently, which would turn "?limit=%zz" into the default
// limit and "?cursor=%%" into the first page.
func Query(c echo.Context) (url.Values, error) {
	if raw := c.Request().URL.RawQuery; strings.ContainsAny(raw, "%;") {
		if _, err := url.ParseQuery(raw); err != nil {
			return nil, bgjobs.Errorf(bgjobs.EInvalid, "malformed query string: %v", err)
		}
	}
	return c.QueryParams(), nil
}

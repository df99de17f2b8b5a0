package errshape

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bgjobs/bgjobs"
)

// Every code has a status, and a status a code maps back to maps to that
// same code: the two tables cannot drift apart.
func TestTablesAgree(t *testing.T) {
	for code, status := range statusOf {
		if back, ok := Code(status); ok {
			require.Equal(t, code, back, "status %d", status)
		}
	}
	for status, code := range codeOfStatus {
		require.Equal(t, status, Status(code), code)
	}
	require.Equal(t, http.StatusInternalServerError, Status("no_such_code"))
	require.Equal(t, "1", RetryAfter(bgjobs.EUnavailable))
	require.Equal(t, "5", RetryAfter(bgjobs.ERateLimited))
	require.Empty(t, RetryAfter(bgjobs.EInvalid), "a bad request stays bad")
}

// Plain rewrites a mounted handler's http.Error into the JSON shape with
// its status, hides a 5xx's text, and leaves any other answer as written,
// flushes included.
func TestPlainRewritesOnlyPlainTextErrors(t *testing.T) {
	serve := func(h http.HandlerFunc) (*httptest.ResponseRecorder, Body) {
		rec := httptest.NewRecorder()
		Plain(h).ServeHTTP(rec, httptest.NewRequest("POST", "/mcp", nil))
		var b Body
		if rec.Header().Get("Content-Type") == "application/json" {
			_ = json.Unmarshal(rec.Body.Bytes(), &b)
		}
		return rec, b
	}
	for _, tc := range []struct {
		status     int
		text, code string
	}{
		{http.StatusBadRequest, "malformed payload: x", bgjobs.EInvalid},
		{http.StatusNotFound, "session not found", bgjobs.ENotFound},
		{http.StatusUnsupportedMediaType, "Content-Type must be 'application/json'", bgjobs.EUnsupportedMediaType},
		{http.StatusForbidden, "Forbidden: invalid Host header", bgjobs.EForbidden},
		{http.StatusNotAcceptable, "no", bgjobs.EInvalid},
		{http.StatusInternalServerError, "failed connection to 10.1.2.3", bgjobs.EInternal},
	} {
		rec, b := serve(func(w http.ResponseWriter, _ *http.Request) { http.Error(w, tc.text, tc.status) })
		require.Equal(t, tc.status, rec.Code)
		require.Equal(t, "application/json", rec.Header().Get("Content-Type"))
		require.Equal(t, tc.code, b.Error.Code)
		if tc.status >= 500 {
			require.Equal(t, "internal error", b.Error.Message)
		} else {
			require.Equal(t, tc.text, b.Error.Message)
		}
	}

	rec, _ := serve(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "event: message\n\n")
		w.(http.Flusher).Flush()
	})
	require.Equal(t, http.StatusOK, rec.Code)
	require.True(t, rec.Flushed, "a stream is flushed through")
	require.Equal(t, "event: message\n\n", rec.Body.String())

	rec, _ = serve(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprint(w, `{"jsonrpc":"2.0","error":{"code":-32600}}`)
	})
	require.Equal(t, `{"jsonrpc":"2.0","error":{"code":-32600}}`, rec.Body.String(), "a JSON error is left as written")
}

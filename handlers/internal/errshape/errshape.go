// Package errshape is the API's error shape in one place: the one table from
// error code to HTTP status (and back, for errors bgjobs did not raise), the
// JSON body every error leaves in, and the rewriters that give that shape to
// answers written outside Echo (net/http's own, a mounted handler's).
package errshape

import (
	"net/http"

	"github.com/bgjobs/bgjobs"
)

// statusOf is the one table from error code to HTTP status.
var statusOf = map[string]int{
	bgjobs.EInvalid:              http.StatusBadRequest,
	bgjobs.EUnauthenticated:      http.StatusUnauthorized,
	bgjobs.ENotFound:             http.StatusNotFound,
	bgjobs.EMethodNotAllowed:     http.StatusMethodNotAllowed,
	bgjobs.EForbidden:            http.StatusForbidden,
	bgjobs.EConflict:             http.StatusConflict,
	bgjobs.EUnsupportedMediaType: http.StatusUnsupportedMediaType,
	bgjobs.ETooLarge:             http.StatusRequestEntityTooLarge,
	bgjobs.ERateLimited:          http.StatusTooManyRequests,
	bgjobs.EUnavailable:          http.StatusServiceUnavailable,
	bgjobs.EInternal:             http.StatusInternalServerError,
}

// codeOfStatus maps Echo's own errors (unknown route, wrong method) back to
// a code, so every error a client sees has the same JSON shape.
var codeOfStatus = map[int]string{
	http.StatusBadRequest:            bgjobs.EInvalid,
	http.StatusUnauthorized:          bgjobs.EUnauthenticated,
	http.StatusNotFound:              bgjobs.ENotFound,
	http.StatusForbidden:             bgjobs.EForbidden,
	http.StatusMethodNotAllowed:      bgjobs.EMethodNotAllowed,
	http.StatusConflict:              bgjobs.EConflict,
	http.StatusRequestEntityTooLarge: bgjobs.ETooLarge,
	http.StatusUnsupportedMediaType:  bgjobs.EUnsupportedMediaType,
	http.StatusTooManyRequests:       bgjobs.ERateLimited,
	http.StatusServiceUnavailable:    bgjobs.EUnavailable,
}

// Body is every error's JSON: {"error": {...}}.
type Body struct {
	Error Detail `json:"error"`
}

// Detail is what went wrong, for the client.
type Detail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
}

// Status is the HTTP status of an error code; 500 for a code it does not
// know.
func Status(code string) int {
	if s, ok := statusOf[code]; ok {
		return s
	}
	return http.StatusInternalServerError
}

// Code is the error code of an HTTP status bgjobs did not choose itself (an
// unknown route, a wrong method, a mounted handler's refusal); ok is false
// for a status without one.
func Code(status int) (code string, ok bool) {
	code, ok = codeOfStatus[status]
	return code, ok
}

// retryAfter is how long, in seconds, a client should wait before trying a
// call again after an error of the code (the Retry-After header): a Redis
// blip passes in a moment; a stream limit frees as others close.
var retryAfter = map[string]string{
	bgjobs.EUnavailable: "1",
	bgjobs.ERateLimited: "5",
}

// RetryAfter is the Retry-After header of an error code, "" when a retry
// would not help.
func RetryAfter(code string) string { return retryAfter[code] }

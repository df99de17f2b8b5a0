// Package bgjobs holds the domain vocabulary shared by every layer: the error
// type with its codes, and the service configuration.
package bgjobs

import (
	"errors"
	"fmt"
)

// Error codes. Handlers map each to one HTTP status in one table; nothing else
// decides a status code.
const (
	EInvalid         = "invalid_argument"
	EUnauthenticated = "unauthenticated"
	ENotFound        = "not_found"
	// EMethodNotAllowed: the path exists, not with this method (the
	// response's Allow header lists those it takes).
	EMethodNotAllowed = "method_not_allowed"
	// EForbidden: the request is refused whoever sends it (/mcp: a Host
	// that is not loopback on a loopback listener, DNS rebinding).
	EForbidden = "forbidden"
	EConflict  = "conflict"
	// EUnsupportedMediaType: a body in a type the path does not take (/mcp
	// takes application/json).
	EUnsupportedMediaType = "unsupported_media_type"
	ETooLarge             = "too_large"
	ERateLimited          = "rate_limited"
	EUnavailable          = "unavailable"
	EInternal             = "internal"
)

// Error is the one error type that crosses package boundaries with a code a
// client can act on. Field names the request field at fault, when one is.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
	// Cause is what went wrong underneath, for the log only: a client never
	// sees it (it names internal addresses).
	Cause error `json:"-"`
}

// Unavailable is the 503 a client can retry: what could not be done, and
// the cause for the log.
func Unavailable(op string, cause error) *Error {
	return &Error{Code: EUnavailable, Message: op + ": temporarily unavailable; retry", Cause: cause}
}

// Unwrap gives errors.Is and As the cause.
func (e *Error) Unwrap() error { return e.Cause }

func (e *Error) Error() string {
	if e.Field != "" {
		return fmt.Sprintf("%s: %s (field %s)", e.Code, e.Message, e.Field)
	}
	return e.Code + ": " + e.Message
}

// Errorf returns an *Error with the given code and a formatted message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// FieldError returns an invalid_argument *Error naming the field at fault.
func FieldError(field, format string, args ...any) *Error {
	return &Error{Code: EInvalid, Message: fmt.Sprintf(format, args...), Field: field}
}

// ErrorCode returns the code of err, or EInternal when err carries none.
func ErrorCode(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return EInternal
}

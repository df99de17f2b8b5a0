package handlers

import (
	"github.com/labstack/echo/v4"

	"github.com/bgjobs/bgjobs/handlers/internal/incoming"
	"github.com/bgjobs/bgjobs/internal/jsonbody"
)

// decodeBody reads one JSON object from the request into v. Unknown fields,
// trailing data, wrong types and oversize bodies are all 4xx errors naming
// what is wrong; nothing here can become a 500.
func decodeBody(c echo.Context, v any) error {
	body, err := incoming.Body(c)
	if err != nil {
		return err
	}
	return decodeJSON(body, v)
}

// decodeOptionalBody is decodeBody for a body the caller may leave out:
// with none, v stays as it is.
func decodeOptionalBody(c echo.Context, v any) error {
	body, err := incoming.Body(c)
	if err != nil || len(body) == 0 {
		return err
	}
	return decodeJSON(body, v)
}

// decodeJSON is decodeBody's pure half, fuzzed on its own.
func decodeJSON(body []byte, v any) error { return jsonbody.Decode(body, v) }

// DefaultBodyTimeout is how long a request's body may take to arrive.
const DefaultBodyTimeout = incoming.DefaultBodyTimeout

package handlers

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/bgjobs/bgjobs"
)

// decodeBody reads one JSON object from the request into v. Unknown fields,
// trailing data, wrong types and oversize bodies are all 4xx errors naming
// what is wrong; nothing here can become a 500.
func decodeBody(c echo.Context, v any) error {
	body, err := io.ReadAll(http.MaxBytesReader(c.Response(), c.Request().Body, bgjobs.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return &bgjobs.Error{Code: bgjobs.ETooLarge, Message: "request body is over 1 MiB"}
		}
		return bgjobs.Errorf(bgjobs.EInvalid, "reading the request body: %v", err)
	}
	return decodeJSON(body, v)
}

// watchHangup reads and drops a body the handler does not use. net/http
// notices a caller hanging up (and ends the request's context) only once
// the body is read to its end; a hand-over (drain, ack) must know when its
// caller is gone, to give back what it took.
func watchHangup(c echo.Context) {
	_, _ = io.Copy(io.Discard, io.LimitReader(c.Request().Body, bgjobs.MaxBodyBytes))
}

// decodeJSON is decodeBody's pure half, fuzzed on its own.
func decodeJSON(body []byte, v any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return bgjobs.Errorf(bgjobs.EInvalid, "request body is empty; want a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if dec.More() {
		return bgjobs.Errorf(bgjobs.EInvalid, "malformed JSON: data after the object")
	}
	if _, err := dec.Token(); err != io.EOF {
		return bgjobs.Errorf(bgjobs.EInvalid, "malformed JSON: data after the object")
	}
	return nil
}

func jsonError(err error) error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return bgjobs.Errorf(bgjobs.EInvalid, "malformed JSON at byte %d: %v", se.Offset, se)
	case errors.As(err, &te):
		field := te.Field
		if field == "" {
			return bgjobs.Errorf(bgjobs.EInvalid, "want a JSON object, got %s", te.Value)
		}
		return bgjobs.FieldError(field, "want %s, got %s", jsonType(te.Type.Kind().String()), te.Value)
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return bgjobs.Errorf(bgjobs.EInvalid, "malformed JSON: unexpected end of input")
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return bgjobs.FieldError(name, "unknown field %q", name)
	}
	return bgjobs.Errorf(bgjobs.EInvalid, "malformed JSON: %v", err)
}

func jsonType(goKind string) string {
	switch goKind {
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	case "int", "int64", "int32", "float64", "uint", "uint64":
		return "a number"
	case "map", "struct":
		return "an object"
	case "slice", "array":
		return "an array"
	}
	return goKind
}

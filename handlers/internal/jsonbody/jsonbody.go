// Package jsonbody decodes request bodies into the API's types, turning
// every way a body can be wrong into a 4xx error that names the field.
package jsonbody

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"

	"github.com/bgjobs/bgjobs"
)

// Decode reads one JSON object from body into v. Unknown fields, trailing
// data, wrong types and an empty body are all *bgjobs.Error with a 4xx code
// naming what is wrong.
func Decode(body []byte, v any) error {
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

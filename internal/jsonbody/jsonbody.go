// Package jsonbody decodes request bodies, and the JSON values inside them
// (a work kind's args), into the API's types, turning every way a value can
// be wrong into a 4xx error that names the field in the caller's words.
package jsonbody

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
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
	return decode(body, v, "")
}

// DecodeAt reads the JSON value raw, found at field prefix of a request
// (say "work.args"), into v, strictly as Decode does; every error names its
// field under prefix ("work.args.url"). A missing or null value leaves v as
// it is: whether one is required is the caller's to say.
func DecodeAt(prefix string, raw []byte, v any) error {
	if t := bytes.TrimSpace(raw); len(t) == 0 || string(t) == "null" {
		return nil
	}
	return decode(raw, v, prefix)
}

func decode(body []byte, v any, prefix string) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err, prefix)
	}
	if dec.More() {
		return at(prefix, "", "malformed JSON: data after the object")
	}
	if _, err := dec.Token(); err != io.EOF {
		return at(prefix, "", "malformed JSON: data after the object")
	}
	return nil
}

// at is an invalid_argument error on field (under prefix), or on the
// request as a whole when both are empty.
func at(prefix, field, format string, args ...any) *bgjobs.Error {
	switch {
	case prefix != "" && field != "":
		field = prefix + "." + field
	case prefix != "":
		field = prefix
	}
	if field == "" {
		return bgjobs.Errorf(bgjobs.EInvalid, format, args...)
	}
	return bgjobs.FieldError(field, format, args...)
}

func jsonError(err error, prefix string) error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return at(prefix, "", "malformed JSON at byte %d: %v", se.Offset, se)
	case errors.As(err, &te):
		return at(prefix, te.Field, "%s", typeMismatch(te))
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return at(prefix, "", "malformed JSON: unexpected end of input")
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return at(prefix, name, "unknown field %q", name)
	}
	return at(prefix, "", "malformed JSON: %v", err)
}

// typeMismatch says what was wanted and what came, in JSON's words, never
// Go's ("want a JSON object, got array", not "work.EchoArgs").
func typeMismatch(te *json.UnmarshalTypeError) string {
	got := te.Value
	switch te.Type.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		// A number that does not fit an integer: a fraction, an exponent
		// (1e3 is refused, not read as 1000), or too many digits.
		if n, ok := strings.CutPrefix(got, "number "); ok {
			if strings.ContainsAny(n, ".eE") {
				return "want a whole number written without a fraction or exponent, got " + n
			}
			return "out of range: " + n
		}
		return "want a number, got " + got
	case reflect.Float32, reflect.Float64:
		return "want a number, got " + got
	case reflect.String:
		return "want a string, got " + got
	case reflect.Bool:
		return "want true or false, got " + got
	case reflect.Map, reflect.Struct:
		return "want a JSON object, got " + got
	case reflect.Slice, reflect.Array:
		return "want an array, got " + got
	}
	return "unexpected " + got
}

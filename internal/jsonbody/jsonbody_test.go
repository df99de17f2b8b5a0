package jsonbody

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bgjobs/bgjobs"
)

type args struct {
	URL   string `json:"url"`
	Depth int    `json:"depth"`
	Deep  struct {
		On bool `json:"on"`
	} `json:"deep"`
}

// A value inside a request names its fields under its own path, in JSON's
// words; missing or null leaves the target alone.
func TestDecodeAtNamesFieldsUnderItsPath(t *testing.T) {
	var a args
	require.NoError(t, DecodeAt("work.args", nil, &a))
	require.NoError(t, DecodeAt("work.args", []byte(" null "), &a))
	require.NoError(t, DecodeAt("work.args", []byte(`{"url":"https://x","depth":2}`), &a))
	require.Equal(t, args{URL: "https://x", Depth: 2}, a)
	for raw, want := range map[string]bgjobs.Error{
		`[1]`:                            {Field: "work.args", Message: "want a JSON object, got array"},
		`"x"`:                            {Field: "work.args", Message: "want a JSON object, got string"},
		`{"url":5}`:                      {Field: "work.args.url", Message: "want a string, got number"},
		`{"depth":1.5}`:                  {Field: "work.args.depth", Message: "want a whole number written without a fraction or exponent, got 1.5"},
		`{"depth":1e2}`:                  {Field: "work.args.depth", Message: "want a whole number written without a fraction or exponent, got 1e2"},
		`{"depth":99999999999999999999}`: {Field: "work.args.depth", Message: "out of range: 99999999999999999999"},
		`{"depth":"2"}`:                  {Field: "work.args.depth", Message: "want a number, got string"},
		`{"deep":{"on":"yes"}}`:          {Field: "work.args.deep.on", Message: "want true or false, got string"},
		`{"colour":1}`:                   {Field: "work.args.colour", Message: `unknown field "colour"`},
		`{"url":"a"} 1`:                  {Field: "work.args", Message: "malformed JSON: data after the object"},
		`{"url":`:                        {Field: "work.args", Message: "malformed JSON: unexpected end of input"},
	} {
		err := DecodeAt("work.args", []byte(raw), &args{})
		var be *bgjobs.Error
		require.ErrorAs(t, err, &be, raw)
		require.Equal(t, bgjobs.EInvalid, be.Code, raw)
		require.Equal(t, want.Field, be.Field, raw)
		require.Equal(t, want.Message, be.Message, raw)
	}
	// A whole body has no path: its errors name the field alone.
	err := Decode([]byte(`{"url":5}`), &args{})
	require.Equal(t, "url", err.(*bgjobs.Error).Field)
}

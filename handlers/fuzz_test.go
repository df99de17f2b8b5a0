package handlers

import (
	"errors"
	"testing"

	"github.com/bgjobs/bgjobs"
)

// The decoders must turn any input into a value or an *bgjobs.Error with a
// 4xx code: never a panic, never an internal error.
func fuzzDecode[T any](f *testing.F, seeds ...string) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var v T
		err := decodeJSON(body, &v)
		if err == nil {
			return
		}
		var be *bgjobs.Error
		if !errors.As(err, &be) {
			t.Fatalf("decode error is not a *bgjobs.Error: %v", err)
		}
		if statusOf[be.Code] < 400 || statusOf[be.Code] >= 500 {
			t.Fatalf("decode error %q maps to %d", be.Code, statusOf[be.Code])
		}
	})
}

func FuzzDecodeSpawn(f *testing.F) {
	fuzzDecode[spawnBody](f,
		`{"origin_session":"chat-42","kind":"turn","subagent_type":"researcher","description":"d","prompt":"p"}`,
		`{"origin_session":"s","kind":"work","work":{"type":"echo","args":{"text":"x","delay_ms":5}}}`,
		`{"origin_session":1}`, `[]`, `{"work":{"args":[1,{"a":null}]}}`, `{"wait_ms":1e99}`)
}

func FuzzDecodeAgent(f *testing.F) {
	fuzzDecode[agentBody](f,
		`{"a2a_url":"http://127.0.0.1:9000/a2a","resume":"a2a","auto_resume":true,"subagent_types":{"r":"You are"}}`,
		`{"subagent_types":{"":1}}`, `{"auto_resume":"yes"}`)
}

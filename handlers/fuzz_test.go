package handlers

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/handlers/internal/errshape"
	"github.com/bgjobs/bgjobs/tasks"
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
		if errshape.Status(be.Code) < 400 || errshape.Status(be.Code) >= 500 {
			t.Fatalf("decode error %q maps to %d", be.Code, errshape.Status(be.Code))
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

// FuzzDecodeBatch: the one-pass decode of a batch gives exactly what
// decoding each member on its own gives, bad members included.
func FuzzDecodeBatch(f *testing.F) {
	for _, s := range []string{
		`{"origin_session":"s","jobs":[{"kind":"work","description":"m","work":{"type":"echo","args":{"text":"m"}}},{"prompt":"p","subagent_type":"r"}]}`,
		`{"origin_session":"s","jobs":[{"kind":"work"},{"kind":1},{"nope":true},null,{"incognito":"yes"}]}`,
		`{"origin_session":"s","jobs":null}`, `{"origin_session":"s","extra":1,"jobs":[]}`, `{"jobs":[{}],"jobs":[{"kind":"turn"}]}`,
		`{"jobs":[{"work":{"type":"echo","args":[1, {"a" : null}]}}]}`, `[]`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		s1, specs1, err1 := decodeBatch(body)
		s2, specs2, err2 := decodeBatchByMember(body)
		if s1 != s2 || !reflect.DeepEqual(specs1, specs2) || !reflect.DeepEqual(err1, err2) {
			t.Fatalf("one pass: %q %+v %v\nby member: %q %+v %v", s1, specs1, err1, s2, specs2, err2)
		}
	})
}

// BenchmarkDecodeBatch: a batch of ten work jobs, decoded in one pass
// beside member by member.
func BenchmarkDecodeBatch(b *testing.B) {
	member := `{"kind":"work","description":"member","work":{"type":"echo","args":{"text":"m"}}}`
	body := []byte(`{"origin_session":"join-1","jobs":[` + strings.Repeat(member+",", 9) + member + `]}`)
	for _, way := range []struct {
		name   string
		decode func([]byte) (string, []tasks.SpawnRequest, error)
	}{{"one pass", decodeBatch}, {"by member", decodeBatchByMember}} {
		b.Run(way.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := way.decode(body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

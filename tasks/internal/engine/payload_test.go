package engine

import (
	"encoding/json"
	"testing"
)

// The hand reader and encoding/json agree on every payload: those
// EnqueueJob writes and other spellings of the same object.
func TestDecodeJobPayload(t *testing.T) {
	written := []JobPayload{
		{Agent: "research", Session: "chat-1", Created: 1733500000123},
		{Agent: "a", Session: "bg:bg-01H"},
		{Agent: "ünï", Session: `quote"back\slash<&>`, Created: 7},
		{Agent: "ctl", Session: "tab\there\x01"},
	}
	for _, want := range written {
		b, _ := json.Marshal(want)
		got, err := DecodeJobPayload(b)
		if err != nil || got != want {
			t.Errorf("%s: got %+v, %v; want %+v", b, got, err, want)
		}
	}
	for _, raw := range []string{
		`{"s":"x","a":"y","c":3}`,
		`{ "a":"y", "s":"x" }`,
		`{"a":"y","s":"x","c":-5}`,
		`{"a":"\u00fc","s":"x"}`,
		`{"a":"y","s":"x","c":1e3}`,
		`{"a":"y","s":"x"}trailing`,
		`{"a":"y","s":"x","c":12`,
		"{\"a\":\"\xff\",\"s\":\"x\"}",
		`not json`,
		``,
	} {
		var want JobPayload
		wantErr := json.Unmarshal([]byte(raw), &want)
		got, err := DecodeJobPayload([]byte(raw))
		if (err != nil) != (wantErr != nil) || (err == nil && got != want) {
			t.Errorf("%q: got %+v, %v; encoding/json %+v, %v", raw, got, err, want, wantErr)
		}
	}
}

func BenchmarkDecodeJobPayload(b *testing.B) {
	raw, _ := json.Marshal(JobPayload{Agent: "research", Session: "chat-0042", Created: 1733500000123})
	b.Run("hand", func(b *testing.B) {
		for b.Loop() {
			_, _ = DecodeJobPayload(raw)
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		for b.Loop() {
			var p JobPayload
			_ = json.Unmarshal(raw, &p)
		}
	})
}

package bgjobs

import (
	"encoding/json"
	"testing"
	"time"
)

// TestEventJSONIsEncodingJSONs: the SSE stream and the console read events
// as encoding/json wrote them; AppendJSON must not change a byte.
func TestEventJSONIsEncodingJSONs(t *testing.T) {
	at := time.Date(2026, 12, 6, 21, 30, 5, 123456789, time.UTC)
	for _, e := range []Event{
		{Type: EventCompleted, Agent: "default", OriginSession: "chat-42", Status: StatusCompleted, At: at},
		{Type: EventCompleted, JobID: "bg-1", Agent: "a", OriginSession: "s", Status: StatusFailed, Kind: KindWork,
			Description: `<b>"quoted"</b> & \ back`, Result: "line\nnext\ttab\r\b\f\x01\x1f", Error: "bad \xff byte, \u2028 and \u2029",
			Attempt: 3, At: at.In(time.FixedZone("x", 3600))},
		{Type: EventBatchJoined, BatchID: "batch-9", Agent: "a", OriginSession: "s", Status: StatusCompleted, Trigger: "straggler",
			Counts: &Counts{Completed: 7, Failed: 2, Cancelled: 1}, Partial: true, At: at.Truncate(time.Second)},
		{Type: EventProgress, JobID: "bg-2", Agent: "a", OriginSession: "s", Status: StatusRunning, Seq: 12, State: "working",
			Text: "héllo — 世界 😀", Counts: &Counts{}, At: time.UnixMilli(0).UTC()},
	} {
		want, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		if got := e.AppendJSON(nil); string(got) != string(want) {
			t.Errorf("AppendJSON:\n got %s\nwant %s", got, want)
		}
	}
}

func FuzzEventJSON(f *testing.F) {
	f.Add("job.completed", "bg-1", "chat <42>", "a\"b\\c\n\u2028", "\xff\xfe", int64(2), 3, true, int64(1765056605123))
	f.Fuzz(func(t *testing.T, typ, id, session, text, result string, attempt int64, seq int, partial bool, ms int64) {
		e := Event{Type: typ, JobID: id, Agent: "a", OriginSession: session, Status: StatusRunning, Description: text,
			Result: result, Error: text, Attempt: attempt, Seq: seq, State: typ, Text: text, Partial: partial,
			At: time.UnixMilli(ms % 253402300799000).UTC()}
		if partial {
			e.Counts = &Counts{Completed: seq, Failed: int(attempt % 1000)}
		}
		want, err := json.Marshal(e)
		if err != nil {
			t.Skip(err) // a time json cannot write: no event carries one
		}
		if got := e.AppendJSON(nil); string(got) != string(want) {
			t.Fatalf("AppendJSON:\n got %s\nwant %s", got, want)
		}
	})
}

// BenchmarkEventJSON: AppendJSON beside json.Marshal, on a job's completion.
func BenchmarkEventJSON(b *testing.B) {
	e := Event{Type: EventCompleted, JobID: "bg-3d932b193c0b", Agent: "default", OriginSession: "chat-42", Status: StatusCompleted,
		Kind: KindWork, Description: "Research ship data", Result: "Report on: Find fuel figures", At: time.Now().UTC()}
	b.Run("AppendJSON", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = e.AppendJSON(make([]byte, 0, 256))
		}
	})
	b.Run("json.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = json.Marshal(e)
		}
	})
}

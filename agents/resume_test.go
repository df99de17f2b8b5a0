package agents

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bgjobs/bgjobs"
)

func batchMeta(n int) bgjobs.ResumeMeta {
	bid := "bt-0123456789ab"
	meta := bgjobs.ResumeMeta{Origin: "background", Kind: "background.resume", Trigger: bid, BatchID: &bid, Counts: bgjobs.Counts{Completed: n}}
	for i := range n {
		meta.Jobs = append(meta.Jobs, fmt.Sprintf("bg-%012d", i))
	}
	return meta
}

// The webhook body is the object the A2A metadata carries, plus the
// session: encoded once, it says what metaMap's map says.
func TestWebhookBodyIsTheResumeObjectPlusSession(t *testing.T) {
	meta := batchMeta(3)
	body, err := webhookBody("chat-1", meta)
	require.NoError(t, err)
	var got map[string]any
	require.NoError(t, json.Unmarshal(body, &got))
	want, err := metaMap(meta)
	require.NoError(t, err)
	want["session"] = "chat-1"
	require.Equal(t, want, got)
}

// BenchmarkWebhookBody: a batch of ten's webhook body, encoded once,
// beside the encode → map → encode it took before.
func BenchmarkWebhookBody(b *testing.B) {
	meta := batchMeta(10)
	b.Run("once", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = webhookBody("chat-1", meta)
		}
	})
	b.Run("through a map", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			md, _ := metaMap(meta)
			md["session"] = "chat-1"
			_, _ = json.Marshal(md)
		}
	})
}

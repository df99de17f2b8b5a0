package tasks

import (
	"context"
	"encoding/json"

	"github.com/bgjobs/bgjobs/search"
)

// ReportsStream is the Redis stream every search writer tails.
func (m *Manager) ReportsStream() string { return m.feeds.ReportsStream() }

// IndexerAliveKey is the key a running search writer keeps fresh.
func (m *Manager) IndexerAliveKey() string { return m.feeds.IndexerAliveKey() }

// AppendDocs adds documents to the reports stream and returns the id of the
// last entry, which a writer's WaitFor can wait on.
func (m *Manager) AppendDocs(ctx context.Context, docs []search.Doc) (string, error) {
	raw := make([][]byte, len(docs))
	for i, d := range docs {
		b, err := json.Marshal(d)
		if err != nil {
			return "", err
		}
		raw[i] = b
	}
	return m.feeds.AppendReports(ctx, raw)
}

// MarkIndexed records that reports are searchable and moves on what waited
// for them (their notifications and resumes). The search writer calls it
// after each batch.
func (m *Manager) MarkIndexed(ctx context.Context, docs []search.Doc) { m.follow.OnIndexed(ctx, docs) }

package tasks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"

	"github.com/bgjobs/bgjobs/search"
)

// errAwaitingIndex keeps an outbox entry until the report it announces is
// searchable; the indexer moves it on.
var errAwaitingIndex = errors.New("report not yet searchable")

// indexGrace is how long a drain holds a long turn report for the index
// before handing it over whole instead.
const indexGrace = 30 * time.Second

// ReportsStream is the Redis stream every search writer tails.
func (m *Manager) ReportsStream() string { return m.k.reports() }

// IndexerAliveKey is the key a running search writer keeps fresh.
func (m *Manager) IndexerAliveKey() string { return m.k.indexerAlive() }

// AppendDocs adds documents to the reports stream and returns the id of the
// last entry, which a writer's WaitFor can wait on.
func (m *Manager) AppendDocs(ctx context.Context, docs []search.Doc) (string, error) {
	cmds := make([]*redis.StringCmd, len(docs))
	_, err := m.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, d := range docs {
			b, _ := json.Marshal(d)
			cmds[i] = p.XAdd(ctx, &redis.XAddArgs{Stream: m.k.reports(), Values: map[string]any{"doc": b}})
		}
		return nil
	})
	if err != nil {
		return "", unavailable("append to the reports stream", err)
	}
	return cmds[len(cmds)-1].Val(), nil
}

// reportDoc is the document of a turn job's report. A retry's report gets
// a new id (by attempt) and supersedes the earlier one.
func reportDoc(j *Job) search.Doc {
	at := j.CreatedAt
	if j.CompletedAt != nil {
		at = *j.CompletedAt
	}
	body := ""
	if j.Result != nil {
		body = *j.Result
	}
	return search.Doc{
		DocID: fmt.Sprintf("rpt-%s-%d-%d", j.ID, j.Generation, j.Attempts), JobID: j.ID, Agent: j.Agent, Session: j.OriginSession,
		SourceType: search.SourceReport, Heading: fmt.Sprintf("%s (%s)", j.Description, j.ID), Body: body,
		TrustTier: search.TrustAgent, CreatedAt: at,
	}
}

// MarkIndexed records that reports are searchable and moves on what waited
// for them (their notifications and resumes). The search writer calls it
// after each batch.
func (m *Manager) MarkIndexed(ctx context.Context, docs []search.Doc) {
	tags := map[string]bool{}
	_, err := m.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, d := range docs {
			if d.SourceType != search.SourceReport || d.JobID == "" {
				continue
			}
			tag := Tag(d.Agent, d.Session)
			hsetIfExistsCmd.Eval(ctx, p, []string{m.k.job(tag, d.JobID)}, fReportIndexed, "1")
			tags[tag] = true
		}
		return nil
	})
	if err != nil {
		m.log.Warn("mark reports indexed", "err", err)
		return
	}
	for tag := range tags {
		_ = m.pump(ctx, tag)
	}
}

// needsIndex reports whether j's notification points at memory_recall, and
// so must wait until its report is searchable.
func (m *Manager) needsIndex(j *Job) bool {
	return j.Kind == KindTurn && j.Status == StatusCompleted && j.Result != nil && !j.Incognito &&
		utf8.RuneCountInString(*j.Result) > m.cfg.SummaryChars
}

// awaitingIndex reports whether the drain holds j back for now: its
// report is to be searchable first, an indexer runs, and the grace has not
// run out.
func (m *Manager) awaitingIndex(ctx context.Context, j *Job) bool {
	return m.needsIndex(j) && !j.ReportIndexed && m.now().Sub(*j.CompletedAt) < indexGrace && m.indexerAlive(ctx)
}

// indexerAlive reports whether some process is indexing reports, cached for
// a second: without one, nothing waits for an index that is not running.
func (m *Manager) indexerAlive(ctx context.Context) bool {
	m.alive.mu.Lock()
	defer m.alive.mu.Unlock()
	if time.Since(m.alive.at) < time.Second {
		return m.alive.ok
	}
	n, err := m.rdb.Exists(ctx, m.k.indexerAlive()).Result()
	m.alive.ok, m.alive.at = err == nil && n == 1, time.Now()
	return m.alive.ok
}

type aliveCache struct {
	mu sync.Mutex
	ok bool
	at time.Time
}

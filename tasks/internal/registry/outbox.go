package registry

import (
	"context"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/bgjobs/bgjobs/tasks/internal/registry/walk"
)

// EntryKind is the kind of an outbox entry: what must follow a state
// change. Entries are recorded by the scripts in the same step as the
// change, so a crash between two Redis calls loses none, and are carried
// out by the follow-up pump (tasks/internal/followup), which is safe to
// repeat. They are stored as "<kind>|<ref>": never change a letter.
//
//	kind           ref            recorded by                      carried out by (followup)
//	EntryAnnounce  job id         settleCmd (plain job, or a       announce: resume for the job
//	                              member after its batch joined),   (through the storm guard)
//	                              releaseWaitCmd (a waiter let go)
//	EntryWaited    job id         settleCmd, a caller waits        announce, once the waiter let go
//	EntryJoin      batch id       settleCmd (last member),         join: batch.joined event, one resume
//	                              forceJoinCmd (straggler timeout) with per-status counts
//	EntryStraggler batch id       settleCmd (first member)         arm the batch's straggler timeout
//	EntryIndex     job id         settleCmd (a report to index)    append the report to the reports stream
//	EntryMerged    id,id,…        stormFlushCmd (window closed)    one merged resume for the listed jobs
//	EntryFold      trigger        idleCmd (busy session idles      one coalesced resume of what is
//	                              with nudges held)                 still undrained
type EntryKind string

// The outbox entry kinds.
const (
	EntryAnnounce  EntryKind = "r"
	EntryWaited    EntryKind = "w"
	EntryJoin      EntryKind = "j"
	EntryStraggler EntryKind = "s"
	EntryIndex     EntryKind = "i"
	EntryMerged    EntryKind = "c"
	EntryFold      EntryKind = "f"
)

// Entry is one outbox entry: its kind, what it refers to, and when it was
// recorded (ms; part of a fold's identity).
type Entry struct {
	Kind EntryKind
	Ref  string
	At   int64
}

// ParseEntry reads a stored entry recorded at at.
func ParseEntry(raw string, at int64) Entry {
	kind, ref, _ := strings.Cut(raw, "|")
	return Entry{Kind: EntryKind(kind), Ref: ref, At: at}
}

// String is the entry as stored.
func (e Entry) String() string { return string(e.Kind) + "|" + e.Ref }

// Outbox reads a session's outbox, oldest first.
func (s *Store) Outbox(ctx context.Context, tag string) ([]Entry, error) {
	zs, err := s.rdb.ZRangeWithScores(ctx, s.k.Outbox(tag), 0, -1).Result()
	if err != nil {
		return nil, unavailable("read outbox", err)
	}
	out := make([]Entry, 0, len(zs))
	for _, z := range zs {
		raw, _ := z.Member.(string)
		out = append(out, ParseEntry(raw, int64(z.Score)))
	}
	return out, nil
}

// Done removes an entry that has been carried out.
func (s *Store) Done(ctx context.Context, tag string, e Entry) error {
	var cmd *redis.IntCmd
	if err := s.do(ctx, func(ctx context.Context, p redis.Pipeliner) { cmd = p.ZRem(ctx, s.k.Outbox(tag), e.String()) }); err != nil {
		return unavailable("outbox", err)
	}
	return unavailable("outbox", cmd.Err())
}

// OutboxSessions calls fn with the tag of every session that has an outbox
// entry.
func (s *Store) OutboxSessions(ctx context.Context, fn func(tag string) error) error {
	return s.scanTags(ctx, s.k.outboxPattern(), "outbox", fn)
}

// StormSessions calls fn with the tag of every session with resumes
// merging behind a storm window.
func (s *Store) StormSessions(ctx context.Context, fn func(tag string) error) error {
	return s.scanTags(ctx, s.k.stormPattern(), "stormq", fn)
}

// scanTags calls fn with the tag of every session key matching pattern.
func (s *Store) scanTags(ctx context.Context, pattern, suffix string, fn func(tag string) error) error {
	return walk.Keys(ctx, s.rdb, pattern, 500, func(key string) error { return fn(s.k.tagOfSessionKey(key, suffix)) })
}

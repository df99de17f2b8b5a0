// Package handover is the one place results are handed to their caller:
// the drain, the ack of a result consumed another way, a wait's take
// (wait_ms), and the undo that gives back what such a call took when its
// caller never received it. Every flip carries the caller's nonce, so an
// undo and a late or resent call of the same nonce agree.
package handover

import (
	"context"
	"time"

	"github.com/bgjobs/bgjobs/internal/pipeline"
	"github.com/bgjobs/bgjobs/tasks/internal/registry"
)

// DrainIdemTTL is how long a drain's Idempotency-Key replays (API.md), and
// how long a nonce's record and void mark stay.
const DrainIdemTTL = 10 * time.Minute

// Store runs the hand-over scripts on the registry's keys.
type Store struct {
	w         *pipeline.Writer
	k         registry.Keys
	retention time.Duration
}

// New returns the hand-overs writing through w with keys k. retention is
// how long a row is kept once notified.
func New(w *pipeline.Writer, k registry.Keys, retention time.Duration) *Store {
	return &Store{w: w, k: k, retention: retention}
}

var (
	ms      = registry.Millis
	boolStr = registry.Flag
)

func (s *Store) ttl() int64      { return int64(s.retention.Seconds()) }
func (s *Store) nonceTTL() int64 { return int64(DrainIdemTTL.Seconds()) }

// DrainRow is one job handed over by a drain.
type DrainRow struct {
	ID, Status, Description, Kind, SubagentType string
	Result, Error, BatchID                      *string
	ReportIndexed                               bool
}

// DrainHold says whether the drain holds reports marked hold_index back
// until they are searchable, and from when on it stops waiting.
type DrainHold struct {
	// On when an indexer runs: without one, nothing waits for it.
	On bool
	// Since: reports completed before it are no longer held (the grace
	// ran out).
	Since time.Time
}

// Drain hands over up to page ended, unnotified jobs of a session, oldest
// completion first, flipping each notified in the same step (drainCmd);
// more says jobs may remain. nonce names this call for Undo; "" for a
// caller that cannot give up.
func (s *Store) Drain(ctx context.Context, tag, idemKey, nonce string, now time.Time, hold DrainHold, page int) (rows []DrainRow, more bool, err error) {
	useIdem, idem := "0", s.k.DrainIdem(tag, "")
	if idemKey != "" {
		useIdem, idem = "1", s.k.DrainIdem(tag, idemKey)
	}
	args := []any{s.k.JobPrefix(tag), useIdem, s.nonceTTL(), s.ttl(), ms(now), boolStr(hold.On), ms(hold.Since), nonce, page}
	for _, f := range registry.DrainFields {
		args = append(args, f)
	}
	keys := []string{s.k.Pending(tag), idem, s.k.Took(tag, nonce), s.k.Void(tag, nonce)}
	raw, err := s.w.Script(ctx, drainCmd, keys, args...).Slice()
	if err != nil {
		return nil, false, registry.Unavailable("drain", err)
	}
	if len(raw) > 0 {
		n, _ := raw[0].(int64)
		more, raw = n == 1, raw[1:]
	}
	rows = make([]DrainRow, 0, len(raw))
	for _, r := range raw {
		vals, _ := r.([]any)
		if len(vals) != len(registry.DrainFields) {
			continue
		}
		str := func(i int) string { v, _ := vals[i].(string); return v }
		row := DrainRow{ID: str(0), Status: str(1), Description: str(2), Kind: str(3), SubagentType: str(9), ReportIndexed: str(10) == "1"}
		if str(4) == "1" {
			v := str(5)
			row.Result = &v
		}
		if str(6) == "1" {
			v := str(7)
			row.Error = &v
		}
		if b := str(8); b != "" {
			row.BatchID = &b
		}
		rows = append(rows, row)
	}
	return rows, more, nil
}

// Ack is the drain's flip for one job consumed another way (ackCmd). It
// reports whether this call flipped it. registry.ErrNoJob, ErrNotEnded.
func (s *Store) Ack(ctx context.Context, tag, id, nonce string, now time.Time) (bool, error) {
	keys := []string{s.k.Job(tag, id), s.k.Pending(tag), s.k.Took(tag, nonce), s.k.Void(tag, nonce)}
	n, err := s.w.Script(ctx, ackCmd, keys, ms(now), s.ttl(), nonce, s.nonceTTL()).Int64()
	if n == -4 {
		err = context.Canceled // the caller gave up before it ran
	}
	if err != nil {
		return false, registry.Unavailable("ack", err)
	}
	if err := registry.CodeErr(n); err != nil {
		return false, err
	}
	return n == 1, nil
}

// WaitEnd is how a caller's wait on a job (wait_ms) ended.
type WaitEnd int

const (
	// WaitNothing: nothing to hand over or back.
	WaitNothing WaitEnd = iota
	// WaitTaken: the caller took the result; the job is delivered.
	WaitTaken
	// WaitHandedBack: the held announcement became an r| entry for the pump.
	WaitHandedBack
)

// ReleaseWait ends a caller's wait (releaseWaitCmd): take the result if
// take and the job ended, otherwise hand its announcement back.
func (s *Store) ReleaseWait(ctx context.Context, tag, id string, take bool, nonce string, now time.Time) (WaitEnd, error) {
	mode := "release"
	if take {
		mode = "take"
	}
	keys := []string{s.k.Job(tag, id), s.k.Pending(tag), s.k.Outbox(tag), s.k.Took(tag, nonce), s.k.Void(tag, nonce)}
	n, err := s.w.Script(ctx, releaseWaitCmd, keys, mode, ms(now), s.ttl(), nonce, s.nonceTTL()).Int()
	if err != nil {
		return WaitNothing, registry.Unavailable("end a wait", err)
	}
	return WaitEnd(n), nil
}

// Undo takes back what the drain, ack or wait take of nonce took
// (undoHandoverCmd), and voids the nonce so a call of it still on its way
// takes nothing. idemKey is the drain's Idempotency-Key, if any; announce
// re-announces the rows (for a wait's take, which dropped the resume).
func (s *Store) Undo(ctx context.Context, tag, nonce, idemKey string, announce bool, now time.Time) (int, error) {
	idem := s.k.Took(tag, nonce)
	if idemKey != "" {
		idem = s.k.DrainIdem(tag, idemKey)
	}
	keys := []string{s.k.Took(tag, nonce), s.k.Void(tag, nonce), s.k.Pending(tag), idem, s.k.Outbox(tag)}
	n, err := s.w.Script(ctx, undoHandoverCmd, keys, s.k.JobPrefix(tag), nonce, s.nonceTTL(), boolStr(announce), ms(now)).Int()
	return n, registry.Unavailable("undo a hand-over", err)
}

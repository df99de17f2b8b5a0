package registry

import (
	"context"
	"time"
)

// DrainIdemTTL is how long a drain's Idempotency-Key replays (API.md).
const DrainIdemTTL = 10 * time.Minute

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

// Drain hands over every ended, unnotified job of a session, oldest
// completion first, flipping each notified in the same step (drainCmd).
func (s *Store) Drain(ctx context.Context, tag, idemKey string, now time.Time, hold DrainHold) ([]DrainRow, error) {
	useIdem, idem := "0", s.k.drainIdem(tag, "")
	if idemKey != "" {
		useIdem, idem = "1", s.k.drainIdem(tag, idemKey)
	}
	args := []any{s.k.jobPrefix(tag), useIdem, int64(DrainIdemTTL.Seconds()), int64(s.retention.Seconds()), ms(now),
		boolStr(hold.On), ms(hold.Since)}
	for _, f := range drainFields {
		args = append(args, f)
	}
	raw, err := s.w.Script(ctx, drainCmd, []string{s.k.Pending(tag), idem}, args...).Slice()
	if err != nil {
		return nil, unavailable("drain", err)
	}
	rows := make([]DrainRow, 0, len(raw))
	for _, r := range raw {
		vals, _ := r.([]any)
		if len(vals) != len(drainFields) {
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
	return rows, nil
}

// PendingIDs lists up to n undrained jobs of a session, oldest first.
func (s *Store) PendingIDs(ctx context.Context, tag string, n int64) ([]string, error) {
	ids, err := s.rdb.ZRange(ctx, s.k.Pending(tag), 0, n-1).Result()
	return ids, unavailable("read pending", err)
}

// Package listing pages through an agent's or a session's jobs, newest
// first, filtered by status, session or batch, for the API's list, the
// console, the CLI and the cancel cascade.
package listing

import (
	"context"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/tasks/internal/registry"
)

// Request filters the caller's jobs, newest first.
type Request struct {
	Agent   string
	Session string
	Status  string
	BatchID string
	Limit   int
	Cursor  string
	// WithResults keeps each row's result (the console's report cards);
	// API lists omit it.
	WithResults bool
}

// List limits.
const (
	LimitDefault = 50
	LimitMax     = 200
	// ArgsMax is the most work_args a list row carries whole; larger ones
	// become a work_args_excerpt of half as many characters.
	ArgsMax = 1024
	// listScanBudget bounds how many rows one page reads while filtering,
	// so a rare status cannot turn one request into a full scan.
	listScanBudget = 2000
	// listPage is how many ids a list reads at once.
	listPage = 100
)

// List returns a page of jobs (without result and prompt) and the cursor of
// the next page, "" at the end.
func List(ctx context.Context, store *registry.Store, req Request) ([]*bgjobs.Job, string, error) {
	if req.Limit == 0 {
		req.Limit = LimitDefault
	}
	if req.Limit < 1 || req.Limit > LimitMax {
		return nil, "", bgjobs.FieldError("limit", "between 1 and %d", LimitMax)
	}
	if req.Status != "" && !bgjobs.ValidStatus(req.Status) {
		return nil, "", bgjobs.FieldError("status", "want queued, running, completed, failed or cancelled")
	}
	if req.BatchID != "" && !bgjobs.ValidBatchID(req.BatchID) {
		return nil, "", bgjobs.FieldError("batch_id", "batch ids look like bt-0123456789ab")
	}
	list := registry.JobList{Agent: req.Agent}
	if req.Session != "" {
		if err := bgjobs.CheckSession("session", req.Session); err != nil {
			return nil, "", err
		}
		list.Session = req.Session
	}
	max, afterID := "+inf", ""
	if req.Cursor != "" {
		score, id, ok := registry.DecodeCursor(req.Cursor)
		if !ok {
			return nil, "", bgjobs.FieldError("cursor", "not a cursor this API returned")
		}
		max, afterID = score, id
	}
	var out []*bgjobs.Job
	scanned := 0
	lastScore, lastID := "", ""
	// seen counts the members sharing the cursor's score that were listed
	// already, read past in full pages: a batch's members share their
	// spawn's millisecond, and a page of them all listed before is not the
	// end of the list (a batch of 300 listed 250, 50 a page).
	var seen int64
	for scanned < listScanBudget {
		zs, err := store.ListPage(ctx, list, max, seen, listPage)
		if err != nil {
			return nil, "", err
		}
		if len(zs) == 0 {
			return out, "", nil
		}
		var ids, scores []string
		for _, z := range zs {
			id, score := z.ID, z.Score
			// Members that share the cursor's score come in descending id
			// order; skip up to and including the cursor's own.
			if afterID != "" && score == max && id >= afterID {
				continue
			}
			ids, scores = append(ids, id), append(scores, score)
		}
		if len(ids) == 0 {
			if len(zs) < listPage {
				return out, "", nil
			}
			seen += int64(len(zs))
			continue
		}
		seen = 0
		// The page's rows in two round trips, not two per row.
		rows, err := store.LookupMany(ctx, ids)
		if err != nil {
			return nil, "", err
		}
		for i, id := range ids {
			scanned++
			lastScore, lastID = scores[i], id
			j := rows[i]
			if j == nil || j.Agent != req.Agent {
				store.Unlist(list, id) // expired after notification
				continue
			}
			if (req.Status != "" && string(j.Status) != req.Status) ||
				(req.Session != "" && j.OriginSession != req.Session) ||
				(req.BatchID != "" && (j.BatchID == nil || *j.BatchID != req.BatchID)) {
				continue
			}
			if !req.WithResults {
				j.Result = nil
			}
			j.Prompt = ""
			if len(j.WorkArgs) > ArgsMax {
				j.WorkArgsExcerpt, j.WorkArgs = bgjobs.Excerpt(string(j.WorkArgs), ArgsMax/2), nil
			}
			out = append(out, j)
			if len(out) == req.Limit {
				return out, registry.EncodeCursor(lastScore, lastID), nil
			}
		}
		max, afterID = lastScore, lastID
	}
	return out, registry.EncodeCursor(lastScore, lastID), nil
}

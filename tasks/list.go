package tasks

import (
	"context"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/tasks/internal/listing"
)

// ListRequest filters the caller's jobs, newest first.
type ListRequest = listing.Request

// List limits.
const (
	ListLimitDefault = listing.LimitDefault
	ListLimitMax     = listing.LimitMax
	// ListArgsMax is the most work_args a list row carries whole.
	ListArgsMax = listing.ArgsMax
)

// List returns a page of jobs (without result and prompt) and the cursor of
// the next page, "" at the end.
func (m *Manager) List(ctx context.Context, req ListRequest) ([]*bgjobs.Job, string, error) {
	return listing.List(ctx, m.store, req)
}

package tasks

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/internal/pipeline"
)

// BatchMax is the most jobs one fan-out may hold.
const BatchMax = 1000

// SpawnBatch fans out specs as one batch of the session. Bad specs are
// skipped and reported; the good ones spawn. The batch is written with its
// size before any member can run, so it can never join early; its single
// join resume goes out when the last member settles, or as a partial join
// when the straggler timeout passes first.
func (m *Manager) SpawnBatch(ctx context.Context, agent, session string, specs []SpawnRequest) (*bgjobs.BatchResult, error) {
	if err := bgjobs.CheckSession("origin_session", session); err != nil {
		return nil, err
	}
	if len(specs) == 0 {
		return nil, bgjobs.FieldError("jobs", "a batch needs at least one job")
	}
	if len(specs) > BatchMax {
		return nil, &bgjobs.Error{Code: bgjobs.ETooLarge, Message: fmt.Sprintf("at most %d jobs in a batch, got %d", BatchMax, len(specs)), Field: "jobs"}
	}
	m.tenants.NoteSpawner(ctx, agent)
	res := &bgjobs.BatchResult{BatchID: newID("bt-"), Jobs: []bgjobs.BatchMember{}, Skipped: []bgjobs.BatchSkip{}}
	var jobs []*bgjobs.Job
	for i, spec := range specs {
		spec.Agent, spec.OriginSession = agent, session
		j, err := m.checkSpawn(ctx, spec)
		if err != nil {
			var be *bgjobs.Error
			if !errors.As(err, &be) {
				return nil, err // Redis trouble, not a bad spec
			}
			if be.Field != "" {
				be = &bgjobs.Error{Code: be.Code, Message: be.Message, Field: be.Field}
			}
			res.Skipped = append(res.Skipped, bgjobs.BatchSkip{Index: i, Error: be})
			continue
		}
		bid := res.BatchID
		j.BatchID = &bid
		jobs = append(jobs, j)
		res.Jobs = append(res.Jobs, bgjobs.BatchMember{Index: i, ID: j.ID})
	}
	if len(jobs) == 0 {
		first := res.Skipped[0]
		return nil, &bgjobs.Error{Code: bgjobs.EInvalid, Field: fmt.Sprintf("jobs[%d].%s", first.Index, first.Error.Field),
			Message: fmt.Sprintf("all %d job specs are invalid; the first: %s", len(specs), first.Error.Message)}
	}
	var started []pipeline.Op
	for _, j := range jobs {
		e := bgjobs.JobEvent(bgjobs.EventStarted, j, bgjobs.StatusQueued, j.CreatedAt)
		e.BatchID = res.BatchID
		started = append(started, m.feeds.Queue(e))
	}
	if err := m.store.CreateBatch(ctx, bgjobs.Tag(agent, session), res.BatchID, jobs, m.now(), started...); err != nil {
		return nil, err
	}
	// Enqueue with a few goroutines: asynq has no batch enqueue, and a
	// thousand one-by-one round trips would dominate the call.
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for _, j := range jobs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := m.eng.EnqueueJob(ctx, j); err != nil {
				// The member is part of a batch whose size is fixed: end it
				// failed, so it counts as settled and the join still comes.
				msg := "could not be queued: " + err.Error()
				_, _ = m.follow.Settle(ctx, j, bgjobs.Outcome{Status: bgjobs.StatusFailed, Error: &msg})
			}
		})
	}
	wg.Wait()
	return res, nil
}

// CancelBatch cancels the members of one of agent's batches that have not
// ended, and what their own turns spawned, as a cancel of each would; the
// batch then joins once, as it would have, its cancelled members counted.
// It returns the batch as it stands after, and how many this call
// cancelled (a member that ended meanwhile is left as it ended).
func (m *Manager) CancelBatch(ctx context.Context, agent, id string) (*bgjobs.Batch, int, error) {
	b, err := m.GetBatch(ctx, agent, id)
	if err != nil {
		return nil, 0, err
	}
	reason, cancelled := "cancelled with its batch "+id, 0
	for page := range slices.Chunk(b.Jobs, cancelBatchPage) {
		briefs, err := m.store.Briefs(ctx, page)
		if err != nil {
			return nil, cancelled, err
		}
		var open []string
		for _, j := range briefs {
			if j != nil && !j.Status.Terminal() {
				open = append(open, j.ID)
			}
		}
		// Settled from whole rows, read in one round trip for the page.
		rows, err := m.GetMany(ctx, agent, open)
		if err != nil {
			return nil, cancelled, err
		}
		for _, j := range rows {
			switch err := m.cancel(ctx, j, reason); {
			case err == nil:
				cancelled++
			case bgjobs.ErrorCode(err) != bgjobs.EConflict: // not one that ended meanwhile
				return nil, cancelled, err
			}
		}
	}
	b, err = m.GetBatch(ctx, agent, id)
	return b, cancelled, err
}

// cancelBatchPage is how many members CancelBatch reads at once.
const cancelBatchPage = 200

// GetBatch returns the caller's batch, or not_found.
func (m *Manager) GetBatch(ctx context.Context, agent, id string) (*bgjobs.Batch, error) {
	if !bgjobs.ValidBatchID(id) {
		return nil, bgjobs.FieldError("id", "batch ids look like bt-0123456789ab")
	}
	tag, err := m.store.BatchTag(ctx, id)
	if err != nil {
		return nil, err
	}
	if a, _ := bgjobs.SplitTag(tag); tag == "" || a != agent {
		return nil, bgjobs.Errorf(bgjobs.ENotFound, "no batch %s", id)
	}
	b, err := m.store.LoadBatch(ctx, tag, id)
	if err != nil {
		return nil, err
	}
	if b == nil {
		return nil, bgjobs.Errorf(bgjobs.ENotFound, "no batch %s", id)
	}
	return b, nil
}

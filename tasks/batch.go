package tasks

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bgjobs/bgjobs"
)

// BatchMax is the most jobs one fan-out may hold.
const BatchMax = 1000

// BatchMember is a spawned member of a batch, by its index in the request.
type BatchMember struct {
	Index int    `json:"index"`
	ID    string `json:"id"`
}

// BatchSkip is a spec that was not spawned, and why.
type BatchSkip struct {
	Index int           `json:"index"`
	Error *bgjobs.Error `json:"error"`
}

// BatchResult is what SpawnBatch created.
type BatchResult struct {
	BatchID string        `json:"batch_id"`
	Jobs    []BatchMember `json:"jobs"`
	Skipped []BatchSkip   `json:"skipped"`
}

// Batch is a fan-out and its join state.
type Batch struct {
	ID            string     `json:"batch_id"`
	OriginSession string     `json:"origin_session"`
	Size          int        `json:"size"`
	Settled       int        `json:"settled"`
	Counts        Counts     `json:"counts"`
	Joined        bool       `json:"joined"`
	Partial       bool       `json:"partial"`
	JoinedAt      *time.Time `json:"joined_at"`
	Jobs          []string   `json:"jobs"`
	CreatedAt     time.Time  `json:"created_at"`
}

// SpawnBatch fans out specs as one batch of the session. Bad specs are
// skipped and reported; the good ones spawn. The batch is written with its
// size before any member can run, so it can never join early; its single
// join resume goes out when the last member settles, or as a partial join
// when the straggler timeout passes first.
func (m *Manager) SpawnBatch(ctx context.Context, agent, session string, specs []SpawnRequest) (*BatchResult, error) {
	if err := bgjobs.CheckSession("origin_session", session); err != nil {
		return nil, err
	}
	if len(specs) == 0 {
		return nil, bgjobs.FieldError("jobs", "a batch needs at least one job")
	}
	if len(specs) > BatchMax {
		return nil, &bgjobs.Error{Code: bgjobs.ETooLarge, Message: fmt.Sprintf("at most %d jobs in a batch, got %d", BatchMax, len(specs)), Field: "jobs"}
	}
	res := &BatchResult{BatchID: newID("bt-"), Jobs: []BatchMember{}, Skipped: []BatchSkip{}}
	var jobs []*Job
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
			res.Skipped = append(res.Skipped, BatchSkip{Index: i, Error: be})
			continue
		}
		bid := res.BatchID
		j.BatchID = &bid
		jobs = append(jobs, j)
		res.Jobs = append(res.Jobs, BatchMember{Index: i, ID: j.ID})
	}
	if len(jobs) == 0 {
		first := res.Skipped[0]
		return nil, &bgjobs.Error{Code: bgjobs.EInvalid, Field: fmt.Sprintf("jobs[%d].%s", first.Index, first.Error.Field),
			Message: fmt.Sprintf("all %d job specs are invalid; the first: %s", len(specs), first.Error.Message)}
	}
	tag := Tag(agent, session)
	if err := m.store.createBatch(ctx, tag, res.BatchID, jobs, m.now()); err != nil {
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
			if err := m.enqueue(ctx, j); err != nil {
				// The member is part of a batch whose size is fixed: end it
				// failed, so it counts as settled and the join still comes.
				msg := "could not be queued: " + err.Error()
				_, _ = m.settle(ctx, j, Outcome{Status: StatusFailed, Error: &msg})
				return
			}
			m.publish(Event{Type: EventStarted, JobID: j.ID, BatchID: res.BatchID, Agent: j.Agent, OriginSession: j.OriginSession,
				Status: StatusQueued, Kind: j.Kind, Description: j.Description, At: j.CreatedAt})
		})
	}
	wg.Wait()
	return res, nil
}

// GetBatch returns the caller's batch, or not_found.
func (m *Manager) GetBatch(ctx context.Context, agent, id string) (*Batch, error) {
	if !bgjobs.ValidBatchID(id) {
		return nil, bgjobs.FieldError("id", "batch ids look like bt-0123456789ab")
	}
	tag, err := m.rdb.HGet(ctx, m.k.batchIndex(), id).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, unavailable("look up batch", err)
	}
	if a, _ := splitTag(tag); tag == "" || a != agent {
		return nil, bgjobs.Errorf(bgjobs.ENotFound, "no batch %s", id)
	}
	b, err := m.loadBatch(ctx, tag, id)
	if err != nil {
		return nil, unavailable("read batch", err)
	}
	if b == nil {
		return nil, bgjobs.Errorf(bgjobs.ENotFound, "no batch %s", id)
	}
	return b, nil
}

func (m *Manager) loadBatch(ctx context.Context, tag, id string) (*Batch, error) {
	var h *redis.MapStringStringCmd
	var members *redis.StringSliceCmd
	if _, err := m.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		h = p.HGetAll(ctx, m.k.batch(tag, id))
		members = p.LRange(ctx, m.k.batchJobs(tag, id), 0, -1)
		return nil
	}); err != nil {
		return nil, err
	}
	f := h.Val()
	if len(f) == 0 {
		return nil, nil
	}
	n := func(k string) int { v, _ := strconv.Atoi(f[k]); return v }
	_, session := splitTag(tag)
	b := &Batch{ID: id, OriginSession: session, Size: n("size"), Settled: n("settled"),
		Counts:  Counts{Completed: n(string(StatusCompleted)), Failed: n(string(StatusFailed)), Cancelled: n(string(StatusCancelled))},
		Partial: f["partial"] == "1", Jobs: members.Val(), CreatedAt: msTime(f["created_at"])}
	if s := f["joined_at"]; s != "" {
		t := msTime(s)
		b.Joined, b.JoinedAt = true, &t
	}
	if b.Jobs == nil {
		b.Jobs = []string{}
	}
	return b, nil
}

// createBatch writes the batch (size first) and every member row in one
// round trip.
func (s *Store) createBatch(ctx context.Context, tag, id string, jobs []*Job, now time.Time) error {
	ids := make([]any, len(jobs))
	for i, j := range jobs {
		ids[i] = j.ID
	}
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, s.k.batch(tag, id), map[string]any{"id": id, "size": len(jobs), "settled": 0,
			string(StatusCompleted): 0, string(StatusFailed): 0, string(StatusCancelled): 0, "created_at": ms(now)})
		p.RPush(ctx, s.k.batchJobs(tag, id), ids...)
		p.HSet(ctx, s.k.batchIndex(), id, tag)
		for _, j := range jobs {
			s.queueCreate(ctx, p, j)
		}
		return nil
	})
	if err != nil {
		return unavailable("create batch", err)
	}
	return nil
}

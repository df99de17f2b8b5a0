package registry

import (
	"context"
	"encoding/base64"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/tasks/internal/registry/walk"
)

// The job lists: every job of an agent, and of a session, newest first.

// JobList names a job list: an agent's, or one session's when Session is set.
type JobList struct{ Agent, Session string }

func (s *Store) listKey(l JobList) string {
	if l.Session != "" {
		return s.k.SessionJobs(bgjobs.Tag(l.Agent, l.Session))
	}
	return s.k.AgentJobs(l.Agent)
}

// ListPage reads up to count ids of a job list, newest first, with scores
// at most max ("+inf" or ms), past the first offset of them. Ids sharing
// a score come in descending order.
func (s *Store) ListPage(ctx context.Context, l JobList, max string, offset, count int64) ([]ScoredID, error) {
	key := s.listKey(l)
	zs, err := s.rdb.ZRevRangeByScoreWithScores(ctx, key, &redis.ZRangeBy{Max: max, Min: "-inf", Offset: offset, Count: count}).Result()
	if err != nil {
		return nil, unavailable("list jobs", err)
	}
	out := make([]ScoredID, len(zs))
	for i, z := range zs {
		id, _ := z.Member.(string)
		out[i] = ScoredID{ID: id, Score: strconv.FormatInt(int64(z.Score), 10)}
	}
	return out, nil
}

// ScoredID is a job list member: its id and score (ms, as text).
type ScoredID struct{ ID, Score string }

// Unlist drops an id from a job list (its row expired).
func (s *Store) Unlist(l JobList, id string) {
	key := s.listKey(l)
	s.later(func(ctx context.Context, p redis.Pipeliner) { p.ZRem(ctx, key, id) })
}

// AgentsWithJobs lists the agents that have a job list.
func (s *Store) AgentsWithJobs(ctx context.Context) ([]string, error) {
	var out []string
	err := walk.Keys(ctx, s.rdb, s.k.agentJobsPattern(), 200, func(key string) error {
		out = append(out, s.k.agentOfKey(key, "agent:", ":jobs"))
		return nil
	})
	return out, unavailable("list agents", err)
}

// EachAgentJobBefore hands each the ids of an agent's jobs created before
// cutoff, oldest first, about page at a time (walk.Before).
func (s *Store) EachAgentJobBefore(ctx context.Context, agent string, cutoff time.Time, page int64, each func(ids []string) error) error {
	return s.before(ctx, s.k.AgentJobs(agent), "list jobs", cutoff, page, each)
}

// before is walk.Before, its reads' failures a 503 naming what; each's own
// errors come back as each returned them.
func (s *Store) before(ctx context.Context, key, what string, cutoff time.Time, page int64, each func(ids []string) error) error {
	var failed error
	err := walk.Before(ctx, s.rdb, key, cutoff, page, func(ids []string) error {
		failed = each(ids)
		return failed
	})
	if failed != nil {
		return failed
	}
	return unavailable(what, err)
}

// EncodeCursor is a job list's page cursor: the last row's score and id.
func EncodeCursor(score, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(score + "|" + id))
}

// DecodeCursor reads a cursor EncodeCursor made; ok is false for anything
// else.
func DecodeCursor(c string) (score, id string, ok bool) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return "", "", false
	}
	score, id, ok = strings.Cut(string(b), "|")
	if !ok || !bgjobs.ValidJobID(id) {
		return "", "", false
	}
	if _, err := strconv.ParseInt(score, 10, 64); err != nil {
		return "", "", false
	}
	return score, id, true
}

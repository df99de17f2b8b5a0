package registry

import (
	"context"
	"encoding/base64"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bgjobs/bgjobs"
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
	err := ScanKeys(ctx, s.rdb, s.k.agentJobsPattern(), 200, func(key string) error {
		out = append(out, s.k.agentOfKey(key, "agent:", ":jobs"))
		return nil
	})
	return out, unavailable("list agents", err)
}

// EachAgentJobBefore hands each the ids of an agent's jobs created before
// cutoff, oldest first, about page at a time (eachBefore).
func (s *Store) EachAgentJobBefore(ctx context.Context, agent string, cutoff time.Time, page int64, each func(ids []string) error) error {
	return s.eachBefore(ctx, s.k.AgentJobs(agent), "list jobs", cutoff, page, each)
}

// eachBefore hands each the members of the sorted set key scored at most
// cutoff, lowest first, about page at a time: read in one reply, a
// deployment's million ended jobs were a reply of tens of megabytes that
// held Redis while it was built. A page ends where a score does: the
// members sharing its last score are read whole (a batch's members share
// their spawn's millisecond), so the next page starts past that score, and
// members each removes meanwhile shift nothing. An error of each ends the
// walk with it; what names a failed read in its 503.
func (s *Store) eachBefore(ctx context.Context, key, what string, cutoff time.Time, page int64, each func(ids []string) error) error {
	min, max := "-inf", ms(cutoff)
	for {
		zs, err := s.rdb.ZRangeByScoreWithScores(ctx, key, &redis.ZRangeBy{Min: min, Max: max, Count: page}).Result()
		if err != nil {
			return unavailable(what, err)
		}
		ids := make([]string, 0, len(zs))
		for _, z := range zs {
			id, _ := z.Member.(string)
			ids = append(ids, id)
		}
		full := int64(len(zs)) == page
		if full {
			last := strconv.FormatInt(int64(zs[len(zs)-1].Score), 10)
			i := len(zs)
			for i > 0 && zs[i-1].Score == zs[len(zs)-1].Score {
				i--
			}
			tied, err := s.rdb.ZRangeByScore(ctx, key, &redis.ZRangeBy{Min: last, Max: last}).Result()
			if err != nil {
				return unavailable(what, err)
			}
			ids, min = append(ids[:i], tied...), "("+last
		}
		if len(ids) > 0 {
			if err := each(ids); err != nil {
				return err
			}
		}
		if !full {
			return nil
		}
	}
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

// Package eventhub serves the agents' events to many readers with one
// blocking read of their Redis streams per process, fanned out to every
// subscriber (SSE clients, the console): a thousand open streams cost one
// connection, not a thousand taken from the pool the API and the workers
// share.
package eventhub

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/tasks/internal/registry/feeds"
)

const (
	// hubBlock bounds one blocking read, so an agent subscribed meanwhile
	// joins the read within it.
	hubBlock = 250 * time.Millisecond
	// subscriptionBuffer events may wait for a slow subscriber; past it the
	// subscription ends and its client reconnects with Last-Event-ID,
	// missing nothing.
	subscriptionBuffer = 512
)

// Subscription is one reader of events.
type Subscription struct {
	// C delivers the events, in stream order per agent. It is closed when
	// the subscription ends: by Close, or because its reader fell behind
	// (Err then says so).
	C <-chan bgjobs.StreamEvent

	c      chan bgjobs.StreamEvent
	h      *Hub
	owner  string
	agents []string
	last   map[string]string // per agent, the last id delivered
	joined uint64            // the hub's read epoch when it joined
	err    error
	closed bool
}

// ErrSlowReader ends a subscription whose reader fell behind.
var ErrSlowReader = errors.New("event reader fell behind; reconnect with Last-Event-ID")

// Err says why C was closed, once it is: nil after Close.
func (s *Subscription) Err() error {
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	return s.err
}

// Close ends the subscription and frees its place.
func (s *Subscription) Close() {
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	s.h.drop(s, nil)
}

// Hub is the process's one reader of event streams.
type Hub struct {
	feeds             *feeds.Store
	log               *slog.Logger
	perAgent, maximum int

	mu     sync.Mutex
	subs   map[string]map[*Subscription]bool // by agent
	owners map[string]int                    // open subscriptions by owner
	total  int
	cursor map[string]string // per agent, the last id read
	// epoch counts reads; rewound[a] is the epoch in which a subscriber
	// moved agent a's cursor back (it needs events already read).
	epoch   uint64
	rewound map[string]uint64
	wake    chan struct{}
	stop    context.CancelFunc
	wg      sync.WaitGroup
}

// New returns a hub reading f; each owner may hold perAgent subscriptions,
// the process maximum in all.
func New(f *feeds.Store, log *slog.Logger, perAgent, maximum int) *Hub {
	return &Hub{feeds: f, log: log, perAgent: perAgent, maximum: maximum,
		subs: map[string]map[*Subscription]bool{}, owners: map[string]int{}, cursor: map[string]string{}, rewound: map[string]uint64{},
		wake: make(chan struct{}, 1)}
}

// Start runs the hub's reader until Stop. With no subscriber it waits
// without touching Redis.
func (h *Hub) Start(ctx context.Context) error {
	ctx, h.stop = context.WithCancel(ctx)
	h.wg.Go(func() { h.loop(ctx) })
	return nil
}

// Stop ends the reader and every subscription.
func (h *Hub) Stop() {
	if h.stop != nil {
		h.stop()
	}
	h.wg.Wait()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, set := range h.subs {
		for s := range set {
			h.drop(s, nil)
		}
	}
}

// Subscribe opens a subscription to the agents' events after the given
// ids (one per agent; "0" from the start). owner is who holds it (the
// caller's agent, "" for the admin); past the owner's share or the
// process's maximum the answer is rate_limited.
func (h *Hub) Subscribe(owner string, after map[string]string) (*Subscription, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.owners[owner] >= h.perAgent {
		return nil, bgjobs.Errorf(bgjobs.ERateLimited, "at most %d open event streams per agent", h.perAgent)
	}
	if h.total >= h.maximum {
		return nil, bgjobs.Errorf(bgjobs.ERateLimited, "this server holds its most event streams (%d); retry later", h.maximum)
	}
	// Every subscriber's point goes into the one read the hub makes for
	// all: an id Redis refuses would fail that read for every stream of
	// the process, so it never gets that far.
	for _, id := range after {
		if !ValidID(id) {
			return nil, bgjobs.FieldError("Last-Event-ID", "not an event id this API sent: %q", bgjobs.CutRunes(id, 64))
		}
	}
	c := make(chan bgjobs.StreamEvent, subscriptionBuffer)
	s := &Subscription{C: c, c: c, h: h, owner: owner, last: map[string]string{}, joined: h.epoch}
	for a, id := range after {
		s.agents = append(s.agents, a)
		s.last[a] = id
		if h.subs[a] == nil {
			h.subs[a] = map[*Subscription]bool{}
		}
		h.subs[a][s] = true
		// Read this agent from the earliest point any subscriber needs;
		// those further along skip what they have seen.
		if cur, ok := h.cursor[a]; !ok || idLess(id, cur) {
			h.cursor[a], h.rewound[a] = id, h.epoch
		}
	}
	h.owners[owner]++
	h.total++
	select {
	case h.wake <- struct{}{}:
	default:
	}
	return s, nil
}

// drop ends s (the hub's lock held).
func (h *Hub) drop(s *Subscription, err error) {
	if s.closed {
		return
	}
	s.closed, s.err = true, err
	for _, a := range s.agents {
		delete(h.subs[a], s)
		if len(h.subs[a]) == 0 {
			delete(h.subs, a)
			delete(h.cursor, a)
			delete(h.rewound, a)
		}
	}
	h.owners[s.owner]--
	if h.owners[s.owner] == 0 {
		delete(h.owners, s.owner)
	}
	h.total--
	close(s.c)
}

func (h *Hub) loop(ctx context.Context) {
	for ctx.Err() == nil {
		h.mu.Lock()
		h.epoch++
		epoch := h.epoch
		after := make(map[string]string, len(h.cursor))
		for a, id := range h.cursor {
			after[a] = id
		}
		h.mu.Unlock()
		if len(after) == 0 {
			select {
			case <-ctx.Done():
				return
			case <-h.wake:
			}
			continue
		}
		events, next, err := h.feeds.ReadEvents(ctx, after, hubBlock)
		if err != nil {
			if ctx.Err() == nil {
				h.log.Warn("event hub read", slog.Any("err", err))
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
			}
			continue
		}
		h.mu.Lock()
		for _, e := range events {
			for s := range h.subs[e.Agent] {
				// One that joined during this read waits for the next, which
				// starts where it asked: its events come in order, once.
				if s.joined >= epoch || !idLess(s.last[e.Agent], e.ID) {
					continue
				}
				select {
				case s.c <- e:
					s.last[e.Agent] = e.ID
				default:
					h.drop(s, ErrSlowReader)
				}
			}
		}
		for a, id := range next {
			if _, ok := h.cursor[a]; ok && h.rewound[a] < epoch && idLess(h.cursor[a], id) {
				h.cursor[a] = id
			}
		}
		h.mu.Unlock()
	}
}

// ValidID reports whether id is a point the hub can read after: "$" (from
// now), or a stream id, "ms" or "ms-seq" in decimal, each within 64 bits.
func ValidID(id string) bool {
	if id == "$" {
		return true
	}
	l, r, dash := strings.Cut(id, "-")
	return decimal64(l) && (!dash || decimal64(r))
}

func decimal64(s string) bool {
	_, err := strconv.ParseUint(s, 10, 64)
	return err == nil
}

// idLess compares stream ids ("ms-seq"); "$" and "" sort first, as no
// point at all.
func idLess(a, b string) bool {
	am, as := splitID(a)
	bm, bs := splitID(b)
	return am < bm || (am == bm && as < bs)
}

func splitID(id string) (ms, seq uint64) {
	l, r, _ := strings.Cut(id, "-")
	ms, _ = strconv.ParseUint(l, 10, 64)
	seq, _ = strconv.ParseUint(r, 10, 64)
	return ms, seq
}

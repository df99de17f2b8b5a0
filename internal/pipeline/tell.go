package pipeline

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Messages between processes ride the wake-up channel: a worker listens
// there already, so they cost no connection of their own. A wake-up's
// payload is a pending list's key; a told message starts with tellMark,
// which no key does, then its topic, the sender and the message, each
// after a tellMark:
//
//	\x00<topic>\x00<sender>\x00<message>
//
// The sender's own message comes back to it over pub/sub and is dropped
// there: it acted on its own news already.
const tellMark = "\x00"

type tellers struct {
	self  string // names this process among the fleet's
	mu    sync.RWMutex
	heard map[string]func(msg string)
}

func newTellers() tellers {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return tellers{self: hex.EncodeToString(b), heard: map[string]func(string){}}
}

// Tell sends msg on topic to every other process that listens (a running
// worker: see FetchWaits), on the follow-up lane. Nothing is kept for a
// process that is not listening.
func (w *Writer) Tell(topic, msg string) {
	payload := tellMark + topic + tellMark + w.tellers.self + tellMark + msg
	w.add(func(ctx context.Context, p redis.Pipeliner) { p.Publish(ctx, wakeChannel, payload) })
}

// Heard makes fn receive what other processes Tell on topic, on the
// listener's goroutine, in order: fn must not block for long. Register
// before the worker starts.
func (w *Writer) Heard(topic string, fn func(msg string)) {
	t := &w.tellers
	t.mu.Lock()
	defer t.mu.Unlock()
	t.heard[topic] = fn
}

// told hands a told message to its topic's receiver, unless this process
// sent it; ok is false for a payload that is no told message (a wake-up).
func (t *tellers) told(payload string) (ok bool) {
	rest, ok := strings.CutPrefix(payload, tellMark)
	if !ok {
		return false
	}
	topic, rest, _ := strings.Cut(rest, tellMark)
	sender, msg, _ := strings.Cut(rest, tellMark)
	if sender == t.self {
		return true
	}
	t.mu.RLock()
	fn := t.heard[topic]
	t.mu.RUnlock()
	if fn != nil {
		fn(msg)
	}
	return true
}

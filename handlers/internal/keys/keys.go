// Package keys resolves the bearer keys the API and the console accept:
// keys from the configuration, and keys made with `bgjobs keys create`
// (kept in Redis as digests); and it says when no key exists at all (open
// mode). Where a key comes from in a request is the handlers' business.
package keys

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bgjobs/bgjobs"
)

// Who is who a key acts for.
type Who struct {
	// Agent is the agent the key is scoped to; "" for the admin key (its
	// requests name the agent they act for).
	Agent string
	// Admin may manage any agent.
	Admin bool
}

// Keys checks keys. Configured keys are compared as SHA-256 digests in
// constant time, against every one of them, so neither timing nor length
// tells a guess how close it came.
type Keys struct {
	// open is true in open mode (no key anywhere) until a stored key
	// appears: Open checks for one at most every openRecheck.
	open    atomic.Bool
	checked atomic.Int64
	count   func(ctx context.Context) (int64, error)
	agents  []entry
	admin   *[32]byte
	stored  *storedKeys
}

type entry struct {
	sum   [32]byte
	agent string
}

// New returns the keys of cfg, with lookup finding a stored key's agent
// by the key's digest (Digest; "" if there is none) and count counting
// stored keys.
func New(cfg bgjobs.Config, lookup func(ctx context.Context, digest string) (string, error), count func(ctx context.Context) (int64, error)) *Keys {
	k := &Keys{count: count, stored: &storedKeys{lookup: lookup, cache: map[[32]byte]storedKey{}}}
	k.open.Store(cfg.OpenMode())
	for key, agent := range cfg.APIKeys {
		k.agents = append(k.agents, entry{sha256.Sum256([]byte(key)), agent})
	}
	if cfg.AdminKey != "" {
		sum := sha256.Sum256([]byte(cfg.AdminKey))
		k.admin = &sum
	}
	return k
}

// Lookup finds who a key acts for: a configured key first, then a stored
// one. ok is false for an empty or unknown key.
func (k *Keys) Lookup(ctx context.Context, key string) (who Who, ok bool, err error) {
	if key == "" {
		return Who{}, false, nil
	}
	// One digest serves both: the configured keys are held as digests, and
	// stored keys are stored (and cached) by it.
	return k.lookup(ctx, sha256.Sum256([]byte(key)))
}

// same compares two key digests in constant time.
func same(a, b [32]byte) bool { return subtle.ConstantTimeCompare(a[:], b[:]) == 1 }

// Set is a fixed set of keys (the metrics key and the admin key), held as
// digests and matched in constant time.
type Set [][32]byte

// NewSet holds keys, leaving out empty ones.
func NewSet(keys ...string) Set {
	var s Set
	for _, k := range keys {
		if k != "" {
			s = append(s, sha256.Sum256([]byte(k)))
		}
	}
	return s
}

// Has reports whether key is one of the set's, comparing with every one.
func (s Set) Has(key string) bool {
	sum := sha256.Sum256([]byte(key))
	found := false
	for _, k := range s {
		found = same(sum, k) || found
	}
	return found
}

// Digest is how a key is known past the request that presented it: its
// SHA-256, in hex.
func Digest(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// LookupDigest is Lookup by a key's Digest (a console sign-in keeps the
// digest of the key it was made with, never the key).
func (k *Keys) LookupDigest(ctx context.Context, digest string) (who Who, ok bool, err error) {
	var sum [32]byte
	if n, err := hex.Decode(sum[:], []byte(digest)); err != nil || n != len(sum) {
		return Who{}, false, nil
	}
	return k.lookup(ctx, sum)
}

func (k *Keys) lookup(ctx context.Context, sum [32]byte) (Who, bool, error) {
	if who, ok := k.resolve(sum); ok {
		return who, true, nil
	}
	agent, err := k.stored.get(ctx, sum)
	if err != nil || agent == "" {
		return Who{}, false, err
	}
	return Who{Agent: agent}, true, nil
}

// resolve returns who the configured key with digest sum acts for, or false.
func (k *Keys) resolve(sum [32]byte) (Who, bool) {
	found := Who{}
	ok := 0
	for _, e := range k.agents {
		if same(sum, e.sum) {
			found, ok = Who{Agent: e.agent}, 1
		}
	}
	if k.admin != nil && same(sum, *k.admin) {
		found, ok = Who{Admin: true}, 1
	}
	return found, ok == 1
}

// openRecheck bounds how long open mode outlives the first key made with
// `bgjobs keys create` while the server runs.
const openRecheck = 2 * time.Second

// Open reports open mode: no key configured and none stored yet. Once a
// stored key appears (checked at most every openRecheck) it ends for good.
func (k *Keys) Open(ctx context.Context) bool {
	if !k.open.Load() {
		return false
	}
	now, last := time.Now().UnixMilli(), k.checked.Load()
	if now-last >= openRecheck.Milliseconds() && k.checked.CompareAndSwap(last, now) {
		if n, err := k.count(ctx); err == nil && n > 0 {
			k.open.Store(false)
		}
	}
	return k.open.Load()
}

// storedKeyTTL is how long a stored key's lookup is trusted, so that a
// revocation takes effect within it.
const storedKeyTTL = 5 * time.Second

type storedKeys struct {
	lookup func(ctx context.Context, digest string) (string, error)
	mu     sync.Mutex
	cache  map[[32]byte]storedKey
}

type storedKey struct {
	agent string
	exp   time.Time
}

func (s *storedKeys) get(ctx context.Context, id [32]byte) (string, error) {
	if s.lookup == nil {
		return "", nil
	}
	s.mu.Lock()
	if e, ok := s.cache[id]; ok && time.Now().Before(e.exp) {
		s.mu.Unlock()
		return e.agent, nil
	}
	s.mu.Unlock()
	agent, err := s.lookup(ctx, hex.EncodeToString(id[:]))
	if err != nil {
		return "", err
	}
	s.mu.Lock()
	if len(s.cache) > 10000 {
		clear(s.cache) // a flood of wrong keys must not grow this forever
	}
	s.cache[id] = storedKey{agent: agent, exp: time.Now().Add(storedKeyTTL)}
	s.mu.Unlock()
	return agent, nil
}

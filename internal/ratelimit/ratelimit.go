package ratelimit

import (
	"context"
	"sync"
	"time"

	"github.com/shardmover/shardmover/internal/ctxtime"
)

// Burst is how far behind its schedule a Limiter lets writers fall before
// it forgets the time they left unused: after an idle spell, at most this
// much time's worth of bytes passes without waiting.
const Burst = 100 * time.Millisecond

// Limiter spaces waits so that the bytes granted stay at rate bytes/s, with
// at most Burst of burst. It keeps a virtual schedule: each Wait takes the
// next n/rate seconds of it and sleeps until its share begins. The zero
// value is not usable; use New.
type Limiter struct {
	rate  float64
	now   func() time.Time
	sleep func(context.Context, time.Duration) error

	mu   sync.Mutex
	next time.Time // when the next grant's share of the schedule begins
}

// New returns a limiter of bytesPerSecond, or nil (no limit) when
// bytesPerSecond <= 0. A nil *Limiter's Wait returns at once.
func New(bytesPerSecond int64) *Limiter {
	if bytesPerSecond <= 0 {
		return nil
	}
	return &Limiter{rate: float64(bytesPerSecond), now: time.Now, sleep: ctxtime.Sleep}
}

// Rate returns the limit in bytes/s (0 for a nil limiter: none).
func (l *Limiter) Rate() int64 {
	if l == nil {
		return 0
	}
	return int64(l.rate)
}

// Wait blocks until n more bytes may pass, or ctx is done while it waits
// (then it returns ctx.Err(); the bytes stay booked, which only slows later
// waits). Any n is allowed: a large one is booked at once and the waits
// after it pay for it.
func (l *Limiter) Wait(ctx context.Context, n int) error {
	if l == nil || n <= 0 {
		return nil
	}
	if d := l.reserve(n); d > 0 {
		return l.sleep(ctx, d)
	}
	return nil
}

// reserve books n bytes on the schedule and returns how long the caller
// must wait before sending them.
func (l *Limiter) reserve(n int) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if floor := now.Add(-Burst); l.next.Before(floor) {
		l.next = floor
	}
	at := l.next
	l.next = l.next.Add(time.Duration(float64(n) / l.rate * float64(time.Second)))
	return at.Sub(now)
}

package ratelimit

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// fakeClock is a clock that only moves when a waiter sleeps on it, so tests
// count time instead of measuring it.
type fakeClock struct {
	mu    sync.Mutex
	t     time.Time
	slept time.Duration
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// sleep advances the clock past d. Waiters that run one after another see
// the time the others slept.
func (c *fakeClock) sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.slept += d
	c.t = c.t.Add(d)
	return nil
}

func newFake(rate int64) (*Limiter, *fakeClock) {
	c := &fakeClock{t: time.Unix(1_000_000, 0)}
	l := New(rate)
	l.now, l.sleep = c.now, c.sleep
	return l, c
}

func TestNilAndZero(t *testing.T) {
	if l := New(0); l != nil {
		t.Fatalf("New(0) = %v, want nil (no limit)", l)
	}
	if l := New(-5); l != nil {
		t.Fatalf("New(-5) = %v, want nil (no limit)", l)
	}
	var l *Limiter
	if err := l.Wait(context.Background(), 1<<30); err != nil {
		t.Fatalf("nil limiter: %v", err)
	}
	if l.Rate() != 0 {
		t.Fatalf("nil limiter rate %d", l.Rate())
	}
	if r := New(1234).Rate(); r != 1234 {
		t.Fatalf("rate %d, want 1234", r)
	}
}

// One writer sending 10 s worth of bytes waits 10 s less the burst.
func TestSingleWriterGetsTheWholeRate(t *testing.T) {
	const rate = 1000
	l, c := newFake(rate)
	for i := 0; i < 100; i++ {
		if err := l.Wait(context.Background(), 100); err != nil {
			t.Fatal(err)
		}
	}
	// 10,000 bytes at 1000 B/s: the last grant starts at 9.9 s; the first
	// 100 ms were burst.
	if want := 9900*time.Millisecond - Burst; c.slept != want {
		t.Fatalf("slept %v, want %v", c.slept, want)
	}
}

// Two writers sharing one limiter together get the rate, not twice it: the
// bytes both sent take as long as if one writer had sent them.
func TestWritersShareTheRate(t *testing.T) {
	const rate = 1000
	l, c := newFake(rate)
	var wg sync.WaitGroup
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				if err := l.Wait(context.Background(), 100); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	// Whatever the interleaving, the schedule has booked 10,000 bytes, i.e.
	// 10 s from the start less the burst.
	start := time.Unix(1_000_000, 0)
	if got, want := l.next.Sub(start), 10*time.Second-Burst; got != want {
		t.Fatalf("schedule ends %v after the start, want %v", got, want)
	}
	// The clock only moves by sleeping; every waiter's grant start is at or
	// before the clock when it returns, so the clock reached the last grant.
	if got := c.now().Sub(start); got < 9900*time.Millisecond-Burst {
		t.Fatalf("clock moved %v, want at least %v", got, 9900*time.Millisecond-Burst)
	}
}

// Idle time is forgotten beyond the burst: after a long pause only Burst's
// worth of bytes passes at once.
func TestIdleTimeCappedAtBurst(t *testing.T) {
	const rate = 1000
	l, c := newFake(rate)
	if d := l.reserve(1000); d != -Burst {
		t.Fatalf("first reserve waits %v, want %v (burst)", d, -Burst)
	}
	c.t = c.t.Add(time.Hour) // idle
	if d := l.reserve(100); d != -Burst {
		t.Fatalf("after idle: wait %v, want %v", d, -Burst)
	}
	if d := l.reserve(100); d != 0 {
		t.Fatalf("second after idle: wait %v, want 0", d)
	}
	if d := l.reserve(100); d != 100*time.Millisecond {
		t.Fatalf("third after idle: wait %v, want 100ms", d)
	}
}

func TestWaitHonoursContext(t *testing.T) {
	l := New(1)                                                // one byte a second
	if err := l.Wait(context.Background(), 1000); err != nil { // booked at once
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := l.Wait(ctx, 1); !errors.Is(err, context.Canceled) { // ~1000 s away
		t.Fatalf("cancelled wait returned %v", err)
	}
}

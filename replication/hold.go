package replication

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"go.uber.org/zap"
)

// Holding the applier at a source position, so that the target can be read
// at exactly the point a source snapshot was taken (CreateTemporarySlot):
// every source transaction whose commit LSN (the start of its commit record,
// BeginMessage.FinalLSN, StreamCommit's CommitLSN) is below the position
// applied and committed on the target, none at or past it.
//
// A hold at lsn is checked at every Begin (and every streamed transaction's
// commit, which goes through Begin): a transaction committing at or past the
// lowest hold is not applied; the session first commits its group, waits
// until the executor has run everything before, reports itself parked there,
// and waits without reading the source (it keeps sending status updates, so
// the walsender does not time out) until no hold stops that transaction any
// more. Hold.Wait returns once the target has committed every transaction
// below lsn: the session is parked at or past lsn, or Processed has reached
// lsn (an idle source: the walsender's WAL end passed lsn with nothing to
// apply, which means every commit before it was delivered).
//
// A hold can be taken only at a position the applier has not gone past: the
// highest commit LSN a session has let through (or, for a new session, the
// origin's durable progress) must be below lsn, otherwise ErrHoldPassed.
// The check and the session's check at Begin are under one lock, so a
// transaction is either let through before the hold exists (and the hold is
// refused) or stopped by it.

// ErrHoldPassed is returned (wrapped) by Hold and Hold.Wait when the applier
// has already applied, or let through, a transaction committing at or after
// the position asked for: the target can no longer be read at it.
var ErrHoldPassed = errors.New("the applier has already passed the hold position")

// holdState is the Stream's holds, under Stream.mu.
type holdState struct {
	holds map[*Hold]struct{}
	// begun is the highest commit LSN of a transaction a session let through
	// the hold check, or just below the durable progress a session started
	// from: nothing at or past a hold may have been applied.
	begun pglogrepl.LSN
	// parked is the commit LSN of the transaction a session is parked
	// before, with everything before it committed on the target (0: none).
	parked pglogrepl.LSN
}

// Hold keeps a Stream's applier from applying any source transaction that
// commits at or after its position until it is released. See Stream.Hold.
type Hold struct {
	s   *Stream
	lsn pglogrepl.LSN
	err error // set under s.mu when the hold can no longer be kept
}

// LSN is the hold's position.
func (h *Hold) LSN() pglogrepl.LSN { return h.lsn }

// Hold registers a hold at lsn: from now on no transaction committing at or
// after lsn is applied until Release. It fails with ErrHoldPassed when the
// applier has already let such a transaction through. Several holds may be
// registered; the lowest stops the applier. Hold returns at once; Wait
// waits for the applier to reach the position.
func (s *Stream) Hold(lsn pglogrepl.LSN) (*Hold, error) {
	if lsn == 0 {
		return nil, errors.New("hold at 0/0: no position")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hold.begun >= lsn {
		return nil, fmt.Errorf("%w: hold at %s, the applier is at %s", ErrHoldPassed, lsn, s.hold.begun)
	}
	if s.hold.holds == nil {
		s.hold.holds = map[*Hold]struct{}{}
	}
	h := &Hold{s: s, lsn: lsn}
	s.hold.holds[h] = struct{}{}
	return h, nil
}

// HoldAt is Hold then Wait: it returns once every source transaction
// committing before lsn is committed on the target and none at or after it
// is, and keeps it so until release is called (release is idempotent). On
// error nothing is held.
func (s *Stream) HoldAt(ctx context.Context, lsn pglogrepl.LSN) (release func(), err error) {
	h, err := s.Hold(lsn)
	if err != nil {
		return nil, err
	}
	if err := h.Wait(ctx); err != nil {
		h.Release()
		return nil, err
	}
	return h.Release, nil
}

// Release lets the applier go on past the hold (once no lower hold stops
// it). It is idempotent.
func (h *Hold) Release() {
	s := h.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.hold.holds[h]; !ok {
		return
	}
	delete(s.hold.holds, h)
	s.wakeLocked()
}

// Wait blocks until every source transaction committing before the hold's
// position is committed on the target, ctx is done, the hold is released
// or broken (ErrHoldPassed), or Run returns (its error, wrapped). A Stream
// that is between sessions (reconnecting) is waited for.
func (h *Hold) Wait(ctx context.Context) error {
	s := h.s
	s.mu.Lock()
	for {
		_, held := s.hold.holds[h]
		switch {
		case h.err != nil:
			s.mu.Unlock()
			return h.err
		case !held:
			s.mu.Unlock()
			return fmt.Errorf("hold at %s: released", h.lsn)
		case (s.hold.parked != 0 && s.hold.parked >= h.lsn) || reached(s.processed, h.lsn, s.walBlock):
			s.mu.Unlock()
			return nil
		case s.stopErr != nil:
			err := s.stopErr
			s.mu.Unlock()
			return fmt.Errorf("hold at %s: stream stopped at %s: %w", h.lsn, s.Processed(), err)
		}
		ch := s.advanced
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
		s.mu.Lock()
	}
}

// wakeLocked wakes every goroutine waiting on s.advanced (WaitFor, Wait, a
// parked session). Called with s.mu held.
func (s *Stream) wakeLocked() {
	close(s.advanced)
	s.advanced = make(chan struct{})
}

// passHoldLocked reports whether a transaction committing at final may be
// applied, and if so records it as begun. Called with s.mu held.
func (s *Stream) passHoldLocked(final pglogrepl.LSN) bool {
	for h := range s.hold.holds {
		if h.err == nil && final >= h.lsn {
			return false
		}
	}
	s.hold.begun = max(s.hold.begun, final)
	return true
}

// startedFrom notes that a session starts from durable progress: the target
// holds every transaction ending at or before it, so a hold at or below it
// can no longer be kept.
func (s *Stream) startedFrom(progress pglogrepl.LSN) {
	if progress == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// A transaction that ends at progress commits before it.
	s.hold.begun = max(s.hold.begun, progress-1)
	for h := range s.hold.holds {
		if h.err == nil && h.lsn <= s.hold.begun {
			h.err = fmt.Errorf("%w: hold at %s, the target's durable progress is %s", ErrHoldPassed, h.lsn, progress)
			s.wakeLocked()
		}
	}
}

// holdBefore is the hold check at a Begin committing at final: it returns
// at once when no hold stops the transaction; otherwise it parks the
// session (see the comment at the top of this file) until none does.
func (ss *session) holdBefore(ctx context.Context, final pglogrepl.LSN) error {
	s := ss.s
	s.mu.Lock()
	pass := s.passHoldLocked(final)
	s.mu.Unlock()
	if pass {
		return nil
	}
	// Everything received so far commits before final: commit it and wait
	// until the executor has run it.
	if err := ss.commitGroup(ctx); err != nil {
		return err
	}
	if ss.app.inTx {
		return permanent(errors.New("hold: a target transaction is open between source transactions"))
	}
	done := make(chan struct{})
	ss.app.cur.notify = done
	if err := ss.app.send(ctx); err != nil {
		return err
	}
	select {
	case <-done:
	case <-ss.exec.done:
		return ss.exec.err
	case <-ctx.Done():
		return ctx.Err()
	}
	s.mu.Lock()
	s.hold.parked = final
	s.wakeLocked()
	s.mu.Unlock()
	s.log.Debug("applier held", zap.Stringer("before", final), zap.Stringer("processed", s.Processed()))
	defer func() {
		s.mu.Lock()
		s.hold.parked = 0
		s.mu.Unlock()
	}()
	status := time.NewTicker(min(s.cfg.StatusInterval, time.Second))
	defer status.Stop()
	for {
		s.mu.Lock()
		pass := s.passHoldLocked(final)
		ch := s.advanced
		s.mu.Unlock()
		if pass {
			return nil
		}
		select {
		case <-ch:
		case <-status.C:
			// The walsender ends a connection it hears nothing from for
			// wal_sender_timeout; nothing is read meanwhile.
			if err := ss.sendStatus(false); err != nil {
				return err
			}
		case <-ss.exec.done:
			return ss.exec.err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

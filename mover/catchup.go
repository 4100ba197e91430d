package mover

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/shardmover/shardmover/metadata"
	"github.com/shardmover/shardmover/replication"
)

// The applier's stream and the catching_up phase (docs/design.md 5).

// startStream runs the applier in the background until stopStream.
func (r *run) startStream(ctx context.Context, m metadata.Move) error {
	if r.stream != nil {
		select {
		case err := <-r.streamDone:
			r.stream, r.streamDone = nil, nil
			r.streamCancel()
			if err != nil && !errors.Is(err, context.Canceled) {
				return fmt.Errorf("applier stopped: %w", err)
			}
		default:
			return nil
		}
	}
	start, err := pglogrepl.ParseLSN(m.SourceLSN)
	if err != nil {
		return permanent(fmt.Errorf("move %d has no valid slot position %q", m.ID, m.SourceLSN))
	}
	s, err := replication.NewStream(replication.StreamConfig{
		SourceDSN:   r.e.dsn(r.source),
		TargetDSN:   r.e.dsn(r.target),
		Slot:        m.Name(),
		Publication: m.Name(),
		Origin:      m.Name(),
		StartLSN:    start,
		Logger:      r.log,
	})
	if err != nil {
		return err
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() { done <- s.Run(sctx) }()
	r.stream, r.streamCancel, r.streamDone = s, cancel, done
	return nil
}

func (r *run) stopStream() {
	if r.stream == nil {
		return
	}
	r.streamCancel()
	<-r.streamDone
	r.stream, r.streamDone, r.streamCancel = nil, nil, nil
}

// streamErr returns the applier's error if it stopped.
func (r *run) streamErr() error {
	if r.stream == nil {
		return errors.New("applier not running")
	}
	select {
	case err := <-r.streamDone:
		r.streamCancel()
		r.stream, r.streamDone, r.streamCancel = nil, nil, nil
		if err == nil {
			err = errors.New("applier stopped")
		}
		return fmt.Errorf("applier: %w", err)
	default:
		return nil
	}
}

// catchUp streams until the lag is under the cutover gate. The byte lag is
// measured against the source's current WAL insert position (not against
// what the applier has heard of, which is nothing before it connects); the
// time lag is the age of the oldest received, unapplied transaction.
func (r *run) catchUp(ctx context.Context, m metadata.Move) (err error) {
	if err := r.startStream(ctx, m); err != nil {
		return err
	}
	src, err := r.e.session(ctx, r.source)
	if err != nil {
		return err
	}
	defer r.e.release(r.source, src, &err)
	lastSave := time.Now()
	for {
		if err := r.streamErr(); err != nil {
			return err
		}
		var current string
		if err := src.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&current); err != nil {
			return err
		}
		head, err := pglogrepl.ParseLSN(current)
		if err != nil {
			return err
		}
		processed := r.stream.Processed()
		var lagBytes uint64
		if head > processed {
			lagBytes = uint64(head - processed)
		}
		_, lag := r.stream.Lag()
		r.progress(Progress{MoveID: m.ID, Phase: CatchingUp, BytesDone: m.BytesCopied, BytesTotal: m.BytesTotal, LagBytes: lagBytes, Lag: lag})
		if time.Since(lastSave) > 2*time.Second {
			lastSave = time.Now()
			_ = r.e.cat.SetProgress(ctx, m.ID, m.BytesCopied, m.BytesTotal, "", processed.String())
			if err := r.lease.Held(ctx); err != nil {
				return err // the loop takes the lease again, or stops
			}
			if r.cancelAsked(ctx) {
				return metadata.ErrPhaseConflict // re-read: the loop cancels
			}
		}
		if processed > 0 && lagBytes <= r.e.cfg.CutoverMaxLagBytes && lag <= r.e.cfg.CutoverMaxLag {
			if fresh, err := r.verifyBeforeCutover(ctx, m); err != nil || fresh {
				return err // verified just now: the next turn measures the lag again
			}
			_ = r.e.cat.SetProgress(ctx, m.ID, m.BytesCopied, m.BytesTotal, "", processed.String())
			return r.changePhase(ctx, m, CatchingUp, Cutover, stepped, fmt.Sprintf("lag %d bytes, %s%s", lagBytes, lag.Round(time.Millisecond), r.verified), "")
		}
		if err := r.awaitCatchUp(ctx, head, processed); err != nil {
			return err
		}
	}
}

// catchUpPoll bounds one wait of catchUp: the lag is measured again at
// least this often.
const catchUpPoll = 100 * time.Millisecond

// awaitCatchUp waits, up to catchUpPoll, for the applier to come within
// the cutover's byte gate of head, the source's insert position just read:
// it returns as soon as the applier gets there rather than at the next
// tick. When it is there already (only the time lag is too high), it waits
// out the poll.
func (r *run) awaitCatchUp(ctx context.Context, head, processed pglogrepl.LSN) error {
	target := head
	if gate := pglogrepl.LSN(r.e.cfg.CutoverMaxLagBytes); head > gate {
		target = head - gate
	}
	wctx, cancel := context.WithTimeout(ctx, catchUpPoll)
	defer cancel()
	if processed > 0 && processed >= target {
		<-wctx.Done()
	} else {
		// An error here is the poll running out or the applier stopping;
		// the next turn reads the latter from streamErr.
		_ = r.stream.WaitFor(wctx, target)
	}
	return ctx.Err()
}

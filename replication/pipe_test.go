package replication

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestChunkPipeDeliversEverythingInOrder(t *testing.T) {
	p := newChunkPipe(3)
	var want bytes.Buffer
	go func() {
		r := rand.New(rand.NewPCG(1, 2))
		for i := 0; i < 2000; i++ {
			b := make([]byte, r.IntN(3000))
			for j := range b {
				b[j] = byte(r.Uint32())
			}
			want.Write(b)
			if _, err := p.Write(b); err != nil {
				p.CloseWrite(err)
				return
			}
		}
		p.CloseWrite(nil)
	}()
	got, err := io.ReadAll(struct{ io.Reader }{p}) // small, uneven reads
	require.NoError(t, err)
	assert.True(t, bytes.Equal(want.Bytes(), got), "the reader must see exactly the bytes written, in order")
}

func TestChunkPipeErrorsReachTheOtherSide(t *testing.T) {
	srcErr := errors.New("source failed")
	p := newChunkPipe(2)
	_, err := p.Write([]byte("abc"))
	require.NoError(t, err)
	p.CloseWrite(srcErr)
	b := make([]byte, 10)
	n, err := p.Read(b)
	require.NoError(t, err)
	assert.Equal(t, "abc", string(b[:n]), "queued data comes before the error")
	_, err = p.Read(b)
	assert.ErrorIs(t, err, srcErr)

	tgtErr := errors.New("target failed")
	q := newChunkPipe(1)
	_, err = q.Write([]byte("x")) // fills the queue
	require.NoError(t, err)
	blocked := make(chan error, 1)
	go func() { _, err := q.Write([]byte("y")); blocked <- err }()
	q.CloseRead(tgtErr)
	assert.ErrorIs(t, <-blocked, tgtErr, "a writer blocked on a full queue is released with the reader's error")
	_, err = q.Write([]byte("z"))
	assert.ErrorIs(t, err, tgtErr)
}

package replication

import (
	"io"
	"sync"
)

// chunkPipe is an in-memory pipe that, unlike io.Pipe, lets the writer run
// ahead of the reader by up to depth chunks. Copy uses it between COPY TO
// on the source and COPY FROM on the target, so that reading from one
// server overlaps with writing to the other instead of taking turns.
// Each Write is copied into one chunk; buffers are recycled, so memory
// stays at about depth+2 chunks of the largest write.
type chunkPipe struct {
	ch   chan []byte   // chunks written, not yet read
	free chan []byte   // spent buffers for reuse
	quit chan struct{} // closed by CloseRead: the reader has stopped

	once sync.Once
	rerr error // why the reader stopped; set before quit is closed
	werr error // why the writer stopped (nil: EOF); set before ch is closed

	cur  []byte // the reader's current chunk, unread part
	back []byte // the buffer cur lives in, to recycle
}

func newChunkPipe(depth int) *chunkPipe {
	return &chunkPipe{ch: make(chan []byte, depth), free: make(chan []byte, depth+2), quit: make(chan struct{})}
}

// Write copies p into a chunk and queues it, waiting while depth chunks
// are queued. It fails once the reader has stopped.
func (p *chunkPipe) Write(b []byte) (int, error) {
	select {
	case <-p.quit:
		return 0, p.rerr
	default:
	}
	if len(b) == 0 {
		return 0, nil
	}
	var buf []byte
	select {
	case buf = <-p.free:
	default:
	}
	if cap(buf) < len(b) {
		buf = make([]byte, len(b))
	}
	buf = buf[:len(b)]
	copy(buf, b)
	select {
	case p.ch <- buf:
		return len(b), nil
	case <-p.quit:
		return 0, p.rerr
	}
}

// CloseWrite ends the stream: the reader sees err, or io.EOF when nil,
// after the queued chunks. Call it once.
func (p *chunkPipe) CloseWrite(err error) {
	p.werr = err
	close(p.ch)
}

// Read returns queued data, then the writer's error or io.EOF.
func (p *chunkPipe) Read(b []byte) (int, error) {
	for len(p.cur) == 0 {
		if p.back != nil {
			select {
			case p.free <- p.back:
			default:
			}
			p.back = nil
		}
		select {
		case buf, ok := <-p.ch:
			if !ok {
				if p.werr != nil {
					return 0, p.werr
				}
				return 0, io.EOF
			}
			p.cur, p.back = buf, buf
		case <-p.quit:
			return 0, p.rerr
		}
	}
	n := copy(b, p.cur)
	p.cur = p.cur[n:]
	return n, nil
}

// CloseRead stops the reader's side: pending and later writes fail with
// err.
func (p *chunkPipe) CloseRead(err error) {
	p.once.Do(func() {
		p.rerr = err
		close(p.quit)
	})
}

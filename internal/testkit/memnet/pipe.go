package memnet

import (
	"io"
	"net"
	"os"
	"sync"
	"time"
)

// The Inmem network's connections: a pair of bounded byte buffers, one per
// direction, as a socket's send and receive buffers are. A write returns
// once its bytes are buffered (it blocks only while the buffer is full,
// as on a socket whose peer stops reading), so a peer pipelines its
// requests as it does over TCP; net.Pipe's writes, which wait for the
// reader, would serialize them. Deadlines behave as net.Conn says: a
// call past its deadline fails with os.ErrDeadlineExceeded (a net.Error
// whose Timeout is true).

// pipeBuffer bounds the bytes written and not yet read in one direction.
const pipeBuffer = 256 << 10

// pipe is one direction: what one end writes and the other reads.
type pipe struct {
	mu     sync.Mutex
	buf    []byte
	eof    bool          // the writing end closed: the reader gets EOF once drained
	broken bool          // the reading end closed: writes fail
	data   chan struct{} // capacity 1: bytes came, or eof
	room   chan struct{} // capacity 1: bytes were read, or broken
}

func newPipe() *pipe {
	return &pipe{data: make(chan struct{}, 1), room: make(chan struct{}, 1)}
}

func wake(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// deadline is one direction's deadline on one end, which wakes a waiting
// call when it is set anew.
type deadline struct {
	mu      sync.Mutex
	t       time.Time
	changed chan struct{} // capacity 1
}

func (d *deadline) set(t time.Time) {
	d.mu.Lock()
	d.t = t
	d.mu.Unlock()
	wake(d.changed)
}

// timer returns a channel that fires at the deadline (nil for none) and
// whether it passed already.
func (d *deadline) timer() (*time.Timer, bool) {
	d.mu.Lock()
	t := d.t
	d.mu.Unlock()
	if t.IsZero() {
		return nil, false
	}
	wait := time.Until(t)
	if wait <= 0 {
		return nil, true
	}
	return time.NewTimer(wait), false
}

// pipeEnd is one end of a connection: it reads in and writes out.
type pipeEnd struct {
	in, out *pipe
	rd, wd  deadline
	once    sync.Once
	closed  chan struct{}
}

// newPipePair returns the two ends of a connection.
func newPipePair() (*pipeEnd, *pipeEnd) {
	ab, ba := newPipe(), newPipe()
	end := func(in, out *pipe) *pipeEnd {
		return &pipeEnd{in: in, out: out, closed: make(chan struct{}),
			rd: deadline{changed: make(chan struct{}, 1)}, wd: deadline{changed: make(chan struct{}, 1)}}
	}
	return end(ba, ab), end(ab, ba)
}

// wait blocks until ch, the deadline d, a new deadline or the end's close;
// it reports the deadline passing.
func (e *pipeEnd) wait(ch chan struct{}, d *deadline) error {
	t, passed := d.timer()
	if passed {
		return os.ErrDeadlineExceeded
	}
	var tc <-chan time.Time
	if t != nil {
		defer t.Stop()
		tc = t.C
	}
	select {
	case <-ch:
	case <-d.changed:
	case <-e.closed:
	case <-tc:
		return os.ErrDeadlineExceeded
	}
	return nil
}

func (e *pipeEnd) isClosed() bool {
	select {
	case <-e.closed:
		return true
	default:
		return false
	}
}

// Read implements net.Conn.
func (e *pipeEnd) Read(b []byte) (int, error) {
	for {
		if e.isClosed() {
			return 0, net.ErrClosed
		}
		p := e.in
		p.mu.Lock()
		if len(p.buf) > 0 {
			n := copy(b, p.buf)
			p.buf = p.buf[n:]
			if len(p.buf) == 0 {
				p.buf = nil
			}
			p.mu.Unlock()
			wake(p.room)
			return n, nil
		}
		eof := p.eof
		p.mu.Unlock()
		if eof {
			return 0, io.EOF
		}
		if len(b) == 0 {
			return 0, nil
		}
		if err := e.wait(p.data, &e.rd); err != nil {
			return 0, err
		}
	}
}

// Write implements net.Conn.
func (e *pipeEnd) Write(b []byte) (int, error) {
	written := 0
	for {
		if e.isClosed() {
			return written, net.ErrClosed
		}
		p := e.out
		p.mu.Lock()
		if p.broken {
			p.mu.Unlock()
			return written, io.ErrClosedPipe
		}
		if n := min(pipeBuffer-len(p.buf), len(b)); n > 0 {
			p.buf = append(p.buf, b[:n]...)
			b = b[n:]
			written += n
			p.mu.Unlock()
			wake(p.data)
		} else {
			p.mu.Unlock()
		}
		if len(b) == 0 {
			return written, nil
		}
		if err := e.wait(p.room, &e.wd); err != nil {
			return written, err
		}
	}
}

// Close implements net.Conn: the other end reads what was written, then
// EOF; its writes fail.
func (e *pipeEnd) Close() error {
	e.once.Do(func() {
		close(e.closed)
		e.out.mu.Lock()
		e.out.eof = true
		e.out.mu.Unlock()
		wake(e.out.data)
		e.in.mu.Lock()
		e.in.broken, e.in.buf = true, nil
		e.in.mu.Unlock()
		wake(e.in.room)
	})
	return nil
}

func (e *pipeEnd) SetDeadline(t time.Time) error {
	e.rd.set(t)
	e.wd.set(t)
	return nil
}

func (e *pipeEnd) SetReadDeadline(t time.Time) error  { e.rd.set(t); return nil }
func (e *pipeEnd) SetWriteDeadline(t time.Time) error { e.wd.set(t); return nil }

// LocalAddr and RemoteAddr are set by inmemConn.
func (e *pipeEnd) LocalAddr() net.Addr  { return nil }
func (e *pipeEnd) RemoteAddr() net.Addr { return nil }

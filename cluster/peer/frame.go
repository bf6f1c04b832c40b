package peer

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Frames: every message between peers outside Raft's own (forwarding, and
// the control channel's calls in cluster) is a frame,
//
//	frame = uvarint length | payload
//
// read with a limit the caller chooses.

// ErrFrameTooLarge is what ReadFrame returns for a frame over its limit,
// before it reads any of the frame's bytes.
var ErrFrameTooLarge = errors.New("frame too large")

// ReadFrame reads one length-prefixed frame of at most limit bytes. The
// buffer grows only as bytes arrive, so a lying length costs nothing.
func ReadFrame(r *bufio.Reader, limit int) ([]byte, error) {
	return ReadFrameInto(r, limit, nil)
}

// ReadFrameInto is ReadFrame into buf's array when the frame is at most
// 64 KiB and fits there (so the frame is only valid until buf is reused),
// else into new memory.
func ReadFrameInto(r *bufio.Reader, limit int, buf []byte) ([]byte, error) {
	n, err := binary.ReadUvarint(r)
	if err != nil {
		return nil, err
	}
	if n > uint64(limit) {
		return nil, fmt.Errorf("%w: %d bytes exceeds %d", ErrFrameTooLarge, n, limit)
	}
	if n <= 64<<10 {
		var b []byte
		if uint64(cap(buf)) >= n {
			b = buf[:n]
		} else {
			b = make([]byte, n)
		}
		_, err := io.ReadFull(r, b)
		return b, err
	}
	b := make([]byte, 0, 64<<10)
	for uint64(len(b)) < n {
		step := min(int(n)-len(b), max(len(b), 64<<10))
		if cap(b)-len(b) < step {
			nb := make([]byte, len(b), len(b)+step)
			copy(nb, b)
			b = nb
		}
		m, err := io.ReadFull(r, b[len(b):len(b)+step])
		b = b[:len(b)+m]
		if err != nil {
			return nil, err
		}
	}
	return b, nil
}

// WriteFrame writes payload to w as one frame: its length, then the bytes
// (no copy of the payload, unlike Frame).
func WriteFrame(w *bufio.Writer, payload []byte) error {
	// The length goes into w's own buffer: a local array would escape
	// through Write and cost an allocation per frame.
	if _, err := w.Write(binary.AppendUvarint(w.AvailableBuffer(), uint64(len(payload)))); err != nil {
		return err
	}
	_, err := w.Write(payload)
	return err
}

// Frame prefixes payload with its length.
func Frame(payload []byte) []byte {
	out := make([]byte, 0, binary.MaxVarintLen64+len(payload))
	out = binary.AppendUvarint(out, uint64(len(payload)))
	return append(out, payload...)
}

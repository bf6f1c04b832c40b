package peer

import (
	"bufio"
	"bytes"
	"testing"
)

func TestReadFrame(t *testing.T) {
	tests := []struct {
		name string
		data []byte
		ok   bool
	}{
		{"small", Frame([]byte("hello")), true},
		{"large", Frame(bytes.Repeat([]byte("x"), 300<<10)), true},
		{"too large", []byte{0xff, 0xff, 0xff, 0xff, 0x0f}, false},
		{"lying length", []byte{0xff, 0xff, 0xff, 0x0f, 'x'}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := ReadFrame(bufio.NewReader(bytes.NewReader(tt.data)), 64<<20)
			if (err == nil) != tt.ok {
				t.Fatalf("err = %v", err)
			}
			if tt.ok && !bytes.Equal(Frame(p), tt.data) {
				t.Fatal("payload changed")
			}
		})
	}
}

// TestReadFrameInto: frames read into a buffer use its array when they
// fit (small frames only) and new memory otherwise, and read the same
// bytes as ReadFrame; WriteFrame writes what Frame builds.
func TestReadFrameInto(t *testing.T) {
	buf := make([]byte, 0, 16)
	for _, tt := range []struct {
		name    string
		payload []byte
		reuse   bool
	}{
		{"fits", []byte("hello"), true},
		{"empty", nil, true},
		{"grows", bytes.Repeat([]byte("y"), 100), false},
		{"large", bytes.Repeat([]byte("x"), 300<<10), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var w bytes.Buffer
			bw := bufio.NewWriter(&w)
			if err := WriteFrame(bw, tt.payload); err != nil {
				t.Fatal(err)
			}
			if err := bw.Flush(); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(w.Bytes(), Frame(tt.payload)) {
				t.Fatal("WriteFrame and frame differ")
			}
			p, err := ReadFrameInto(bufio.NewReader(&w), 64<<20, buf)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(p, tt.payload) {
				t.Fatal("payload changed")
			}
			if reused := cap(p) > 0 && &p[:1][0] == &buf[:1][0]; reused != tt.reuse {
				t.Fatalf("buffer reused: %v, want %v", reused, tt.reuse)
			}
		})
	}
}

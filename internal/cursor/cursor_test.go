package cursor

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"
)

var errBad = errors.New("bad input")

// TestCursor: every read consumes what it read; the first failure is kept,
// wraps the sentinel, names what failed, and empties the cursor.
func TestCursor(t *testing.T) {
	good := binary.AppendUvarint(nil, 300)
	good = binary.AppendVarint(good, -5)
	good = append(good, 7, 3, 'a', 'b', 'c')
	tests := []struct {
		name string
		in   []byte
		want string // "" when the reads succeed
	}{
		{"whole", good, ""},
		{"no byte", good[:len(good)-5], "short byte"},
		{"string beyond the input", good[:len(good)-1], "short string"},
		{"uvarint overflow", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, "short uvarint"},
		{"empty", nil, "short uvarint"},
		{"varint overflow", []byte{1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, "short varint"},
		{"string over the limit", append(append([]byte(nil), good[:len(good)-4]...), 9), "string of 9 bytes exceeds 4"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New(tt.in, errBad, "short")
			u, v, b, s := c.Uvarint(), c.Varint(), c.Byte(), c.Bytes(4)
			if tt.want == "" {
				if c.Err != nil || u != 300 || v != -5 || b != 7 || string(s) != "abc" || len(c.B) != 0 {
					t.Fatalf("%v: %d %d %d %q, %d left", c.Err, u, v, b, s, len(c.B))
				}
				if cap(s) != len(s) {
					t.Fatal("a string's capacity reaches past it")
				}
				return
			}
			if !errors.Is(c.Err, errBad) || !strings.Contains(c.Err.Error(), tt.want) || c.B != nil {
				t.Fatalf("err %v, %d left; want %q", c.Err, len(c.B), tt.want)
			}
			first := c.Err
			if c.Fail("again"); c.Err != first || c.Uvarint() != 0 {
				t.Fatal("the first failure was not kept")
			}
		})
	}
}

// TestVarint: Varint reads what binary.AppendVarint wrote, at the edges too.
func TestVarint(t *testing.T) {
	for _, v := range []int64{0, 1, -1, 63, -64, 64, -65, 1 << 40, -1 << 40, 1<<63 - 1, -1 << 63} {
		c := New(binary.AppendVarint(nil, v), errBad, "short")
		if got := c.Varint(); got != v || c.Err != nil || len(c.B) != 0 {
			t.Fatalf("%d read back as %d (%v)", v, got, c.Err)
		}
	}
}

package resp

import (
	"fmt"
	"strings"
	"testing"
)

// TestPipelineSegments: a pipeline whose replies pass maxSegmentReply, or
// that holds KEYS and SCAN, is answered in several writes; every reply
// still comes back, in order, and the limiter state is that of running the
// commands one by one.
func TestPipelineSegments(t *testing.T) {
	addr := debugServer(t, epoch2030)
	c := rawDial(t, addr)
	docs := len(c.do(t, "COMMAND", "DOCS"))
	if docs*50 <= maxSegmentReply {
		t.Fatalf("COMMAND DOCS replies %d bytes: the pipeline below would not need segments", docs)
	}
	var send strings.Builder
	var want []string
	for i := range 200 {
		switch i % 4 {
		case 0:
			send.WriteString(encode("RL.TOKEN", "k", "1000", "1/s"))
			want = append(want, ints(1, 1000, int64(999-i/4), 0, int64(1000*(i/4+1))))
		case 1:
			send.WriteString(encode("COMMAND", "DOCS"))
			want = append(want, "") // long: only its kind is checked
		case 2:
			send.WriteString(encode("KEYS", "*"))
			want = append(want, "*1 [$1 k]")
		case 3:
			send.WriteString(encode("PING", fmt.Sprint(i)))
			want = append(want, fmt.Sprintf("$%d %d", len(fmt.Sprint(i)), i))
		}
	}
	send.WriteString(encode("SCAN", "0", "COUNT", "1000000"))
	want = append(want, "*2 [$1 0 *1 [$1 k]]")
	c.send(t, send.String())
	for i, w := range want {
		got := string(c.read(t))
		if w == "" {
			if !strings.HasPrefix(got, "*") || len(got) < docs/2 {
				t.Fatalf("reply %d: %.60q..., want COMMAND DOCS", i, got)
			}
			continue
		}
		if got != w {
			t.Fatalf("reply %d: %q, want %q", i, got, w)
		}
	}
	c.do(t, "PING").expect(t, "+PONG")
}

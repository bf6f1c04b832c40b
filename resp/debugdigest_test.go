package resp

import (
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/engine"
)

func TestDebugDigest(t *testing.T) {
	eng := engine.New(engine.Config{Stripes: 4})
	_, addr := serveEngine(t, Config{EnableDebug: true}, eng)
	c := rawDial(t, addr)
	c.do(t, "DEBUG", "CLOCK", "FREEZE", "1893456000000").expect(t, "+OK")
	empty := string(c.do(t, "DEBUG", "DIGEST"))
	if !strings.HasPrefix(empty, "$66 ") || !strings.HasSuffix(empty, " 0") {
		t.Fatalf("digest of an empty engine: %q", empty)
	}
	c.do(t, "RL.TOKEN", "k", "5", "1/s")
	one := string(c.do(t, "DEBUG", "DIGEST"))
	if one == empty || !strings.HasSuffix(one, " 1") {
		t.Fatalf("digest after one decision: %q (empty: %q)", one, empty)
	}
	if again := string(c.do(t, "DEBUG", "DIGEST")); again != one {
		t.Fatalf("digest changed with nothing applied: %q, then %q", one, again)
	}

	off := startServer(t, Config{})
	rawDial(t, off).do(t, "DEBUG", "DIGEST").expect(t,
		"-ERR DEBUG command not allowed. Start sluice with --enable-debug-command to use it.")
}

package resp

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/engine"
)

// TestNoAuthFlagDecides checks that before AUTH exactly AUTH, HELLO, QUIT
// and RESET run, as in Redis, that they are the commands COMMAND INFO
// flags no_auth, and that every other one answers NOAUTH.
func TestNoAuthFlagDecides(t *testing.T) {
	noAuth := map[string]bool{"auth": true, "hello": true, "quit": true, "reset": true}
	srv, addr := serveEngine(t, Config{RequirePass: "pw", EnableDebug: true}, engine.New(engine.Config{Stripes: 4}))
	for _, name := range slices.Sorted(maps.Keys(srv.commands)) {
		cmd := srv.commands[name]
		c := rawDial(t, addr) // QUIT closes its connection
		got := c.do(t, strings.ToUpper(name))
		if refused := got == "-NOAUTH Authentication required."; refused == noAuth[name] {
			t.Errorf("%s before AUTH: reply %q", name, got)
		}
		if cmd.flags.has(flagNoAuth) != noAuth[name] {
			t.Errorf("%s: flags %v", name, cmd.flags.names())
		}
	}
}

// TestTrackedReadsAreReadonlyKeys checks the table's account of tracked
// reads: the key positions of the readonly commands.
func TestTrackedReadsAreReadonlyKeys(t *testing.T) {
	table := buildCommandTable(false, false)
	args := func(s string) [][]byte {
		var out [][]byte
		for _, f := range strings.Fields(s) {
			out = append(out, []byte(f))
		}
		return out
	}
	for _, tc := range []struct{ cmd, keys string }{
		{"rl.peek k", "k"},
		{"exists a b c", "a b c"},
		{"type k", "k"},
		{"pttl k", "k"},
		{"ttl k", "k"},
		{"dbsize", ""},
		{"keys *", ""},
		{"scan 0 match k*", ""},
		{"rl.token k 10 1/s", ""},
		{"del a b", ""},
	} {
		a := args(tc.cmd)
		got := trackedRead(table[string(a[0])], a)
		var parts []string
		for _, k := range got {
			parts = append(parts, string(k))
		}
		if strings.Join(parts, " ") != tc.keys {
			t.Errorf("%s: tracked keys %q, want %q", tc.cmd, parts, tc.keys)
		}
	}
}

// TestSubcommandsDispatchFromTable checks that every subcommand in the
// table has its own run function, so that COMMAND DOCS never documents a
// subcommand that dispatch does not know.
func TestSubcommandsDispatchFromTable(t *testing.T) {
	for _, mode := range [][2]bool{{false, false}, {true, false}, {true, true}} {
		for _, cmd := range buildCommandTable(mode[0], mode[1]) {
			for _, sub := range cmd.subs {
				if sub.run == nil {
					t.Errorf("%s has no run function", sub.name)
				}
				if !strings.HasPrefix(sub.name, cmd.name+"|") {
					t.Errorf("subcommand %s is not named after %s", sub.name, cmd.name)
				}
			}
		}
	}
}

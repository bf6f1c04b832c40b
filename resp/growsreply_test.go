package resp

import (
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/engine"
)

// TestGrowingRepliesRefusedInMulti: every engine operation whose reply
// grows with the keyspace (its row's GrowsReply, engine/ops.go) is the op
// of a command in the table, that command enqueues it, and MULTI refuses
// it. A new op that grows its reply fails here until its command names it
// (command.op), which is what MULTI's refusal reads.
func TestGrowingRepliesRefusedInMulti(t *testing.T) {
	table := buildCommandTable(true, true)
	eng := engine.New(engine.Config{Stripes: 4})
	srv := NewServer(Config{Engine: eng}, NewLocalExecutor(eng, nil))
	named := map[engine.OpCode]string{}
	for _, cmd := range table {
		if cmd.op == 0 {
			continue
		}
		if !cmd.op.GrowsReply() {
			t.Errorf("%s: op %v does not grow its reply: its command.op must be 0", cmd.name, cmd.op)
		}
		named[cmd.op] = cmd.name
		// The command enqueues the op it names (its arguments all "0").
		args := [][]byte{[]byte(cmd.name)}
		for len(args) < max(cmd.arity, -cmd.arity) {
			args = append(args, []byte("0"))
		}
		c := &client{}
		cmd.run(srv, c, args, &pending{})
		if len(c.ops) != 1 || c.ops[0].Code != cmd.op {
			t.Errorf("%s: enqueued %v, want one %v", cmd.name, c.ops, cmd.op)
		}
	}
	for c := range 256 {
		code := engine.OpCode(c)
		if code.GrowsReply() && named[code] == "" {
			t.Errorf("%v grows its reply, but no command of the table names it as its op: MULTI would not refuse its command", code)
		}
	}
	if len(named) < 2 {
		t.Fatalf("only %d commands name a growing op (KEYS and SCAN do)", len(named))
	}

	c := rawDial(t, startServer(t, Config{}))
	for _, name := range named {
		up := strings.ToUpper(name)
		c.do(t, "MULTI").expect(t, "+OK")
		c.do(t, up, "0").expect(t, "-ERR "+up+" is not allowed in MULTI: its reply grows with the keyspace")
		c.do(t, "DISCARD").expect(t, "+OK")
	}
}

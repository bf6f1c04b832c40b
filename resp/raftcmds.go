package resp

import (
	"bytes"
	"context"
	"strconv"
	"time"
)

// adminTimeout bounds an admin command: RAFT.JOIN waits for the new node
// to catch up with every group's log (a snapshot of millions of keys
// takes a while; the join fails earlier when the node stops catching up),
// RAFT.REMOVE for leadership handovers in every group.
func adminTimeout(name string) time.Duration {
	switch name {
	case "raft.join":
		return 10 * time.Minute
	case "raft.remove":
		return time.Minute
	}
	return 10 * time.Second
}

// raftCommands are the cluster commands (docs/commands.md, "Cluster
// commands"): RAFT.* membership and status.
func raftCommands() []*command {
	admin := func(name string, arity int, summary string, args []argDoc,
		do func(ctx context.Context, a ClusterAdmin, args [][]byte) error) *command {
		return &command{
			name: name, arity: arity, group: "cluster", since: "1.0.0", complexity: "O(1)",
			summary: summary, args: args,
			run: func(s *Server, c *client, args [][]byte, p *pending) {
				ctx, cancel := context.WithTimeout(context.Background(), adminTimeout(name))
				defer cancel()
				if err := do(ctx, s.admin, args); err != nil {
					c.local.Error(errorText(err))
					return
				}
				c.local.OK()
			},
		}
	}
	return []*command{
		{
			name: "raft.status", arity: -1, flags: flagLoading | flagStale, group: "cluster", since: "1.0.0",
			complexity: "O(1)", summary: "This node's view of a Raft group (group 0 unless named)",
			args: []argDoc{optional(intArg("group"))},
			run: func(s *Server, c *client, args [][]byte, p *pending) {
				g, err := s.groupArg(args[1:])
				if err != nil {
					c.local.Error(errorText(err))
					return
				}
				st := s.admin.Status(g)
				c.local.Map(len(st))
				for _, kv := range st {
					c.local.BulkString(kv[0])
					c.local.BulkString(kv[1])
				}
			},
		},
		admin("raft.join", 3, "Add a node to every Raft group: a non-voter, then a voter once caught up", []argDoc{strArg("id"), strArg("raft_addr")},
			func(ctx context.Context, a ClusterAdmin, args [][]byte) error {
				return a.Join(ctx, string(args[1]), string(args[2]))
			}),
		admin("raft.remove", 2, "Remove a node from every Raft group, unless that costs a group its majority", []argDoc{strArg("id")},
			func(ctx context.Context, a ClusterAdmin, args [][]byte) error {
				return a.Remove(ctx, string(args[1]))
			}),
		admin("raft.transfer", -1, "Hand a Raft group's leadership (group 0 unless named) to id, or to any voter",
			[]argDoc{optional(strArg("id")), optional(argDoc{name: "group", typ: "integer", token: "GROUP"})},
			func(ctx context.Context, a ClusterAdmin, args [][]byte) error {
				args = args[1:]
				g := 0
				if n := len(args); n >= 2 && bytes.EqualFold(args[n-2], []byte("group")) {
					var err error
					if g, err = groupNumber(a, args[n-1]); err != nil {
						return err
					}
					args = args[:n-2]
				}
				if len(args) > 1 {
					return errSyntax
				}
				id := ""
				if len(args) == 1 {
					id = string(args[0])
				}
				return a.Transfer(ctx, g, id)
			}),
		admin("raft.snapshot", 1, "Take a snapshot now", nil,
			func(ctx context.Context, a ClusterAdmin, args [][]byte) error { return a.Snapshot(ctx) }),
		backupCommand(), // backupcmd.go
	}
}

// groupArg parses RAFT.STATUS's optional group: 0 when absent.
func (s *Server) groupArg(args [][]byte) (int, error) {
	switch len(args) {
	case 0:
		return 0, nil
	case 1:
		return groupNumber(s.admin, args[0])
	}
	return 0, errSyntax
}

// groupNumber parses a Raft group number, 0 to a.Groups()-1.
func groupNumber(a ClusterAdmin, arg []byte) (int, error) {
	g, err := strconv.Atoi(string(arg))
	if err != nil || g < 0 || g >= a.Groups() {
		return 0, NewArgError("group", arg, "this node has Raft groups 0 to "+strconv.Itoa(a.Groups()-1))
	}
	return g, nil
}

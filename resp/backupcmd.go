package resp

import (
	"context"
	"strconv"
	"time"
)

// BackupAdmin is implemented by cluster executors that can hand out a Raft
// group's snapshot (RAFT.BACKUP, used by `sluice backup`).
type BackupAdmin interface {
	// Backup returns group g's snapshot stream, taken through the log on
	// its leader (a follower returns the not-the-leader error), with the
	// applied index and term it was taken at and the engine's lock
	// stripes.
	Backup(ctx context.Context, g int) (index, term uint64, lockStripes int, data []byte, err error)
}

// backupTimeout bounds RAFT.BACKUP: a barrier through the log, then a
// snapshot of the group's whole state.
const backupTimeout = 5 * time.Minute

// backupCommand is RAFT.BACKUP group (docs/commands.md): group g's
// consistent snapshot, for `sluice backup`. Its reply is field-value
// pairs: group, groups, index, term, lock_stripes, snapshot.
func backupCommand() *command {
	return &command{
		name: "raft.backup", arity: 2, group: "cluster", since: "1.0.0", complexity: "O(N) with N the group's keys",
		summary: "A Raft group's state at one applied index, read through the log on its leader (for sluice backup)",
		args:    []argDoc{intArg("group")},
		run: func(s *Server, c *client, args [][]byte, p *pending) {
			b, ok := s.admin.(BackupAdmin)
			if !ok {
				c.local.Error(msgNoBackup.Text())
				return
			}
			g, err := groupNumber(s.admin, args[1])
			if err != nil {
				c.local.Error(errorText(err))
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), backupTimeout)
			defer cancel()
			index, term, stripes, data, err := b.Backup(ctx, g)
			if err != nil {
				c.local.Error(errorText(err))
				return
			}
			c.local.Map(6)
			c.local.BulkString("group")
			c.local.BulkString(strconv.Itoa(g))
			c.local.BulkString("groups")
			c.local.BulkString(strconv.Itoa(s.admin.Groups()))
			c.local.BulkString("index")
			c.local.BulkString(strconv.FormatUint(index, 10))
			c.local.BulkString("term")
			c.local.BulkString(strconv.FormatUint(term, 10))
			c.local.BulkString("lock_stripes")
			c.local.BulkString(strconv.Itoa(stripes))
			c.local.BulkString("snapshot")
			c.local.Bulk(data)
		},
	}
}

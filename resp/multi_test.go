package resp

import (
	"strings"
	"testing"
	"time"
)

// TestMulti checks MULTI, EXEC and DISCARD byte for byte against
// redis-server 7.0.15's replies, and a transaction's limiter commands.
func TestMulti(t *testing.T) {
	c := rawDial(t, debugServer(t, epoch2030)) // on a minute boundary
	steps := []struct {
		args []string
		want string
	}{
		{[]string{"EXEC"}, "-ERR EXEC without MULTI\r\n"},
		{[]string{"DISCARD"}, "-ERR DISCARD without MULTI\r\n"},
		{[]string{"MULTI"}, "+OK\r\n"},
		{[]string{"MULTI"}, "-ERR MULTI calls can not be nested\r\n"},
		{[]string{"PING"}, "+QUEUED\r\n"},
		{[]string{"EXISTS", "a"}, "+QUEUED\r\n"},
		{[]string{"RL.FIXED", "a", "5", "1m"}, "+QUEUED\r\n"},
		{[]string{"EXISTS", "a"}, "+QUEUED\r\n"},
		{[]string{"EXEC"}, "*4\r\n+PONG\r\n:0\r\n*5\r\n:1\r\n:5\r\n:4\r\n:0\r\n:60000\r\n:1\r\n"},
		{[]string{"MULTI"}, "+OK\r\n"},
		{[]string{"FOO"}, "-ERR unknown command 'FOO', with args beginning with: \r\n"},
		{[]string{"PING"}, "+QUEUED\r\n"},
		{[]string{"EXEC"}, "-EXECABORT Transaction discarded because of previous errors.\r\n"},
		{[]string{"MULTI"}, "+OK\r\n"},
		{[]string{"EXISTS"}, "-ERR wrong number of arguments for 'exists' command\r\n"},
		{[]string{"EXEC"}, "-EXECABORT Transaction discarded because of previous errors.\r\n"},
		{[]string{"MULTI"}, "+OK\r\n"},
		{[]string{"RL.FIXED", "b", "5", "1m"}, "+QUEUED\r\n"},
		{[]string{"DISCARD"}, "+OK\r\n"},
		{[]string{"EXEC"}, "-ERR EXEC without MULTI\r\n"},
		{[]string{"EXISTS", "b"}, ":0\r\n"},
		{[]string{"MULTI"}, "+OK\r\n"},
		{[]string{"EXEC"}, "*0\r\n"},
		{[]string{"MULTI"}, "+OK\r\n"},
		{[]string{"KEYS", "*"}, "-ERR KEYS is not allowed in MULTI: its reply grows with the keyspace\r\n"},
		{[]string{"EXEC"}, "-EXECABORT Transaction discarded because of previous errors.\r\n"},
	}
	for _, st := range steps {
		c.send(t, encode(st.args...))
		_ = c.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		var got strings.Builder
		for got.Len() < len(st.want) {
			line, err := c.rd.ReadString('\n')
			if err != nil {
				t.Fatalf("%q: read: %v (so far %q)", st.args, err, got.String())
			}
			got.WriteString(line)
		}
		if got.String() != st.want {
			t.Fatalf("%q: reply %q, want %q", st.args, got.String(), st.want)
		}
	}
}

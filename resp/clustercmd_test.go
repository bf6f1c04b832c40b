package resp

import (
	"testing"
	"time"
)

// TestClusterDisabled checks the Redis Cluster commands on a standalone node
// byte for byte against the replies of redis-server 7.0.15 started without
// cluster-enabled.
func TestClusterDisabled(t *testing.T) {
	addr := startServer(t, Config{})
	c := rawDial(t, addr)
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"CLUSTER", "SLOTS"}, "-ERR This instance has cluster support disabled\r\n"},
		{[]string{"cluster", "info"}, "-ERR This instance has cluster support disabled\r\n"},
		{[]string{"CLUSTER", "HELP"}, "-ERR This instance has cluster support disabled\r\n"},
		{[]string{"CLUSTER", "MYID"}, "-ERR This instance has cluster support disabled\r\n"},
		{[]string{"CLUSTER", "NODES"}, "-ERR This instance has cluster support disabled\r\n"},
		{[]string{"CLUSTER", "SHARDS"}, "-ERR This instance has cluster support disabled\r\n"},
		{[]string{"cluster", "keyslot", "x"}, "-ERR This instance has cluster support disabled\r\n"},
		{[]string{"CLUSTER", "COUNTKEYSINSLOT", "1"}, "-ERR This instance has cluster support disabled\r\n"},
		{[]string{"CLUSTER", "ADDSLOTS", "1"}, "-ERR This instance has cluster support disabled\r\n"},
		{[]string{"READONLY"}, "-ERR This instance has cluster support disabled\r\n"},
		{[]string{"READWRITE"}, "-ERR This instance has cluster support disabled\r\n"},
		{[]string{"ASKING"}, "-ERR This instance has cluster support disabled\r\n"},
		{[]string{"CLUSTER"}, "-ERR wrong number of arguments for 'cluster' command\r\n"},
		{[]string{"CLUSTER", "SLOTS", "x"}, "-ERR wrong number of arguments for 'cluster|slots' command\r\n"},
		{[]string{"CLUSTER", "KEYSLOT"}, "-ERR wrong number of arguments for 'cluster|keyslot' command\r\n"},
		{[]string{"CLUSTER", "FOO", "bar"}, "-ERR unknown subcommand 'FOO'. Try CLUSTER HELP.\r\n"},
		{[]string{"CLUSTER", "READONLY"}, "-ERR unknown subcommand 'READONLY'. Try CLUSTER HELP.\r\n"},
	}
	for _, tc := range tests {
		c.send(t, encode(tc.args...))
		_ = c.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		got, err := c.rd.ReadString('\n')
		if err != nil {
			t.Fatalf("%q: read: %v", tc.args, err)
		}
		if got != tc.want {
			t.Errorf("%q: reply %q, want %q", tc.args, got, tc.want)
		}
	}
}

package peer

import (
	"testing"

	"github.com/hashicorp/raft"
)

func TestDialMapProvider(t *testing.T) {
	p := DialMap{
		Peers: map[string]string{"n1": "127.0.0.1:7001", "n2": "127.0.0.1:7002", "n3": "127.0.0.1:7003"},
		Dial:  map[string]string{"127.0.0.1:7002": "127.0.0.1:9012"},
	}
	tests := []struct {
		id, want string
		err      bool
	}{
		{id: "n2", want: "127.0.0.1:9012"}, // through the proxy
		{id: "n1", want: "127.0.0.1:7001"}, // itself, unmapped
		{id: "n3", want: "127.0.0.1:7003"}, // unmapped peer
		{id: "n9", err: true},              // joined later: raft falls back
	}
	for _, tc := range tests {
		got, err := p.ServerAddr(raft.ServerID(tc.id))
		if (err != nil) != tc.err || string(got) != tc.want {
			t.Errorf("ServerAddr(%s) = %q, %v; want %q (error %v)", tc.id, got, err, tc.want, tc.err)
		}
	}
	if got := MapAddr(p.Dial, "127.0.0.1:8002"); got != "127.0.0.1:8002" {
		t.Errorf("unmapped forward address became %q", got)
	}
}

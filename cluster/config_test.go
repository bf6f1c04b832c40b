package cluster

import (
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/testkit/memnet"
)

func TestConfigValidate(t *testing.T) {
	base := func() Config {
		return Config{ID: "n1", RaftAddr: "127.0.0.1:7001", RESPAddr: "127.0.0.1:6001", DataDir: "d1"}
	}
	peers := map[string]string{"n1": "127.0.0.1:7001", "n2": "127.0.0.1:7002", "n3": "127.0.0.1:7003"}
	tests := []struct {
		name  string
		edit  func(c *Config)
		wants []string // every field named; none means valid
	}{
		{"minimal", func(c *Config) {}, nil},
		{"cluster", func(c *Config) { c.Peers = peers }, nil},
		{"in memory", func(c *Config) { c.DataDir, c.InMemory = "", true }, nil},
		{"in-process network", func(c *Config) { c.Network = memnet.NewInmem().Node("n1") }, nil},
		{"single node on port 0", func(c *Config) { c.RaftAddr = "127.0.0.1:0" }, nil},
		{"empty", func(c *Config) { *c = Config{} }, []string{"ID:", "RaftAddr:", "RESPAddr:", "DataDir:"}},
		{"bad id", func(c *Config) { c.ID = "n 1" }, []string{"ID:"}},
		{"bad addresses", func(c *Config) { c.RaftAddr, c.RESPAddr, c.ForwardAddr = "x", "127.0.0.1", "h:99999" },
			[]string{"RaftAddr:", "RESPAddr:", "ForwardAddr:"}},
		{"unspecified without advertise", func(c *Config) { c.RaftAddr, c.ForwardAddr = "0.0.0.0:7001", ":8001" },
			[]string{"RaftAdvertise:", "ForwardAdvertise:"}},
		{"both storages", func(c *Config) { c.InMemory = true }, []string{"DataDir:"}},
		{"peers without self", func(c *Config) { c.ID = "n4"; c.Peers = peers }, []string{"Peers:"}},
		{"peers with another address", func(c *Config) { c.RaftAddr = "127.0.0.1:7101"; c.Peers = peers }, []string{"Peers:"}},
		{"peers and no bootstrap", func(c *Config) { c.Peers, c.NoBootstrap = peers, true }, []string{"NoBootstrap:"}},
		{"peers on port 0", func(c *Config) {
			c.RaftAddr = "127.0.0.1:0"
			c.Peers = map[string]string{"n1": "127.0.0.1:0", "n2": "127.0.0.1:7002"}
		}, []string{"RaftAddr:"}},
		{"shared peer address", func(c *Config) {
			c.Peers = map[string]string{"n1": "127.0.0.1:7001", "n2": "127.0.0.1:7001"}
		}, []string{"Peers:"}},
		{"limits", func(c *Config) {
			c.ClusterTimeout, c.MaxBatchOps, c.MaxBatchBytes, c.MaxInflight = time.Microsecond, -1, 10, 5000
		}, []string{"ClusterTimeout:", "MaxBatchOps:", "MaxBatchBytes:", "MaxInflight:"}},
		{"raft timing", func(c *Config) {
			c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout = 100*time.Millisecond, 50*time.Millisecond, 200*time.Millisecond
		}, []string{"ElectionTimeout:", "LeaderLeaseTimeout:"}},
		{"wal, everysec", func(c *Config) { c.LogStore, c.Fsync = LogStoreWAL, FsyncEverysec }, nil},
		{"bolt, no", func(c *Config) { c.LogStore, c.Fsync = LogStoreBolt, FsyncNo }, nil},
		{"unknown store and mode", func(c *Config) { c.LogStore, c.Fsync = "lsm", "sometimes" }, []string{"LogStore:", "Fsync:"}},
		{"in memory with a store", func(c *Config) { c.DataDir, c.InMemory, c.Fsync = "", true, FsyncAlways }, []string{"InMemory:"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := base()
			tt.edit(&c)
			err := c.Validate()
			if len(tt.wants) == 0 {
				if err != nil {
					t.Fatalf("valid config refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("invalid config accepted")
			}
			for _, w := range tt.wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not name %s:\n%v", w, err)
				}
			}
		})
	}
}

func TestConfigDefaults(t *testing.T) {
	tests := []struct {
		raft, adv, fwd, fwdAdv string
	}{
		{"127.0.0.1:7001", "", "127.0.0.1:8001", ""},
		{"127.0.0.1:0", "", "127.0.0.1:0", ""},
		{"0.0.0.0:7001", "10.0.0.1:7001", "0.0.0.0:8001", "10.0.0.1:8001"},
		{"127.0.0.1:65000", "", "127.0.0.1:0", ""},
	}
	for _, tt := range tests {
		c := Config{RaftAddr: tt.raft, RaftAdvertise: tt.adv}.withDefaults()
		if c.ForwardAddr != tt.fwd || c.ForwardAdvertise != tt.fwdAdv {
			t.Errorf("RaftAddr %s: forward %s (advertised %q), want %s (%q)", tt.raft, c.ForwardAddr, c.ForwardAdvertise, tt.fwd, tt.fwdAdv)
		}
		if c.ClusterTimeout != 2*time.Second || c.Now == nil || c.Logger == nil {
			t.Errorf("defaults missing: %+v", c)
		}
		// LogStore stays empty: New resolves it from the data dir
		// (TestResolveLogStore).
		if c.LogStore != "" || c.Fsync != FsyncAlways {
			t.Errorf("durability defaults: %q %q, want \"\" always", c.LogStore, c.Fsync)
		}
	}
}

func TestDialMapValidate(t *testing.T) {
	c := Config{ID: "n1", RaftAddr: "127.0.0.1:7001", RESPAddr: "127.0.0.1:6001", InMemory: true,
		DialMap: map[string]string{"127.0.0.1:7002": "nope"}}
	err := c.Validate()
	if err == nil || !strings.Contains(err.Error(), "DialMap") {
		t.Fatalf("Validate: %v, want a DialMap error", err)
	}
	c.DialMap = map[string]string{"127.0.0.1:7002": "127.0.0.1:9012"}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}

package main

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/sluice-rl/sluice/internal/atomicfile"
	"github.com/sluice-rl/sluice/internal/respwire"
	"github.com/sluice-rl/sluice/persistence"
)

// The backup tools (docs/operations.md, "Backup and restore"):
//
//	sluice backup --addr host:port --out FILE   an archive of every group of a live cluster
//	sluice restore --in FILE --data-dir DIR --id ID --peers ...   a new cluster's data dir from it
//	sluice inspect FILE                         what an archive holds
//
// runTool runs one when args name it, and reports whether it did.
func runTool(ctx context.Context, args []string, stdout, stderr io.Writer) (bool, error) {
	if len(args) == 0 {
		return false, nil
	}
	switch args[0] {
	case "backup":
		return true, runBackup(ctx, args[1:], stdout, stderr)
	case "restore":
		return true, runRestore(args[1:], stdout, stderr)
	case "inspect":
		return true, runInspect(args[1:], stdout, stderr)
	}
	return false, nil
}

// backupTimeout bounds a whole backup.
const backupToolTimeout = 10 * time.Minute

// maxBackupReply bounds the reply to RAFT.BACKUP this tool reads.
const maxBackupReply = 600 << 20

func runBackup(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("sluice backup", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:6379", "RESP address of any node of the cluster")
	out := fs.String("out", "", "the archive to write (required)")
	user := fs.String("user", "", "AUTH user name")
	pass := fs.String("pass", "", "AUTH password")
	fs.StringVar(pass, "a", "", "AUTH password (as redis-cli -a)")
	useTLS := fs.Bool("tls", false, "connect with TLS")
	cacert := fs.String("cacert", "", "CA certificate file to verify the server with (--tls)")
	cert := fs.String("cert", "", "client certificate file (--tls)")
	key := fs.String("key", "", "client private key file (--tls)")
	sni := fs.String("sni", "", "server name for TLS (default: the host of --addr)")
	insecure := fs.Bool("insecure", false, "do not verify the server's certificate (--tls)")
	timeout := fs.Duration("timeout", backupToolTimeout, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" || fs.NArg() != 0 {
		return errors.New("backup: usage: sluice backup --addr host:port --out FILE [--user U] [--pass P | -a P] [--tls --cacert F --cert F --key F]")
	}
	var tlsCfg *tls.Config
	if *useTLS {
		var err error
		if tlsCfg, err = clientTLS(*cacert, *cert, *key, *sni, *insecure); err != nil {
			return fmt.Errorf("backup: %w", err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	b := &backupClient{tls: tlsCfg, user: *user, pass: *pass, conns: map[string]*respwire.Conn{}}
	defer b.close()
	info, groups, err := b.run(ctx, *addr)
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	if err := writeArchiveFile(*out, info, groups); err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	fmt.Fprintf(stdout, "backup of %d groups, %d keys, digest %s, written to %s\n",
		info.Groups, info.Keys, hex.EncodeToString(info.Digest[:]), *out)
	return nil
}

// clientTLS is the TLS configuration redis-cli's --tls flags describe.
func clientTLS(cacert, cert, key, sni string, insecure bool) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: sni, InsecureSkipVerify: insecure}
	if cacert != "" {
		pem, err := os.ReadFile(cacert)
		if err != nil {
			return nil, fmt.Errorf("--cacert: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--cacert %s: no certificate in it", cacert)
		}
		cfg.RootCAs = pool
	}
	if (cert == "") != (key == "") {
		return nil, errors.New("--cert and --key go together")
	}
	if cert != "" {
		c, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("--cert/--key: %w", err)
		}
		cfg.Certificates = []tls.Certificate{c}
	}
	return cfg, nil
}

// backupClient asks each group's leader for its snapshot, following the
// not-the-leader replies to the leader's address.
type backupClient struct {
	tls        *tls.Config
	user, pass string
	conns      map[string]*respwire.Conn
	version    string
}

func (b *backupClient) close() {
	for _, c := range b.conns {
		c.Close()
	}
}

// conn returns a connection to addr, authenticated.
func (b *backupClient) conn(ctx context.Context, addr string) (*respwire.Conn, error) {
	if c, ok := b.conns[addr]; ok {
		return c, nil
	}
	d := net.Dialer{Timeout: 5 * time.Second}
	var nc net.Conn
	var err error
	if b.tls != nil {
		cfg := b.tls.Clone()
		if cfg.ServerName == "" {
			if host, _, err := net.SplitHostPort(addr); err == nil {
				cfg.ServerName = host
			}
		}
		nc, err = (&tls.Dialer{NetDialer: &d, Config: cfg}).DialContext(ctx, "tcp", addr)
	} else {
		nc, err = d.DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", addr, err)
	}
	c := respwire.NewConn(nc)
	c.Limits = respwire.Limits{MaxBulk: maxBackupReply}
	if b.pass != "" {
		auth := []string{"AUTH", b.pass}
		if b.user != "" {
			auth = []string{"AUTH", b.user, b.pass}
		}
		v, err := c.Do(10*time.Second, auth...)
		if err != nil || v.Kind == respwire.SimpleError {
			c.Close()
			if err == nil {
				err = errors.New(v.Str)
			}
			return nil, fmt.Errorf("AUTH on %s: %w", addr, err)
		}
	}
	if b.version == "" {
		if v, err := c.Do(10*time.Second, "INFO", "server"); err == nil && v.Kind != respwire.SimpleError {
			for _, line := range strings.Split(v.Str, "\n") {
				if s, ok := strings.CutPrefix(strings.TrimSpace(line), "sluice_version:"); ok {
					b.version = s
				}
			}
		}
	}
	b.conns[addr] = c
	return c, nil
}

// run backs up every group through the node at addr.
func (b *backupClient) run(ctx context.Context, addr string) (persistence.ArchiveInfo, []persistence.GroupBackup, error) {
	info := persistence.ArchiveInfo{Source: addr}
	var groups []persistence.GroupBackup
	var digests [][sha256.Size]byte
	for g := 0; g == 0 || g < info.Groups; g++ {
		gb, n, stripes, err := b.group(ctx, addr, g)
		if err != nil {
			return info, nil, fmt.Errorf("group %d: %w", g, err)
		}
		if g == 0 {
			info.Groups, info.LockStripes = n, stripes
		} else if n != info.Groups || stripes != info.LockStripes {
			return info, nil, fmt.Errorf("group %d: its leader runs %d groups with %d lock stripes, group 0's %d with %d",
				g, n, stripes, info.Groups, info.LockStripes)
		}
		// The digest DEBUG DIGEST gives for this state, from the snapshot
		// decoded as a restore will decode it.
		clock, sum, keys, err := persistence.DigestSnapshot(gb.Snapshot, stripes)
		if err != nil {
			return info, nil, fmt.Errorf("group %d: the snapshot does not decode: %w", g, err)
		}
		gb.Clock, gb.Digest, gb.Keys = clock, sum, int64(keys)
		info.Keys += gb.Keys
		digests = append(digests, gb.Digest)
		groups = append(groups, gb)
	}
	info.Digest = persistence.CombineDigests(digests)
	info.Created = time.Now().UTC()
	info.Version = b.version
	return info, groups, nil
}

// group asks for group g's snapshot, from addr or the leader it names,
// until ctx ends. It returns the node's group count and lock stripes too.
func (b *backupClient) group(ctx context.Context, addr string, g int) (persistence.GroupBackup, int, int, error) {
	target := addr
	var last error
	for {
		if err := ctx.Err(); err != nil {
			if last == nil {
				last = err
			}
			return persistence.GroupBackup{}, 0, 0, last
		}
		c, err := b.conn(ctx, target)
		if err != nil {
			return persistence.GroupBackup{}, 0, 0, err
		}
		deadline, _ := ctx.Deadline()
		v, err := c.Do(time.Until(deadline), "RAFT.BACKUP", strconv.Itoa(g))
		if err != nil {
			c.Close()
			delete(b.conns, target)
			return persistence.GroupBackup{}, 0, 0, fmt.Errorf("RAFT.BACKUP %d on %s: %w", g, target, err)
		}
		if v.Kind == respwire.SimpleError {
			last = fmt.Errorf("RAFT.BACKUP %d on %s: %s", g, target, v.Str)
			if leader, ok := strings.CutPrefix(v.Str, "ERR not the leader; leader is "); ok {
				target = leader
				continue
			}
			if strings.HasPrefix(v.Str, "ERR not the leader") || strings.HasPrefix(v.Str, "CLUSTERDOWN") ||
				strings.HasPrefix(v.Str, "LOADING") || strings.HasPrefix(v.Str, "ERR backup failed") {
				// No leader known yet (an election): ask again shortly.
				target = addr
				select {
				case <-time.After(100 * time.Millisecond):
				case <-ctx.Done():
				}
				continue
			}
			return persistence.GroupBackup{}, 0, 0, last
		}
		return parseBackupReply(v, g)
	}
}

// parseBackupReply reads RAFT.BACKUP's field-value pairs.
func parseBackupReply(v respwire.Value, g int) (persistence.GroupBackup, int, int, error) {
	if !v.IsAggregate() || len(v.Elems)%2 != 0 {
		return persistence.GroupBackup{}, 0, 0, fmt.Errorf("RAFT.BACKUP %d: unexpected reply %.80s", g, v.String())
	}
	f := map[string]string{}
	for i := 0; i < len(v.Elems); i += 2 {
		f[v.Elems[i].Str] = v.Elems[i+1].Str
	}
	num := func(name string) (uint64, error) {
		n, err := strconv.ParseUint(f[name], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("RAFT.BACKUP %d: field %s %q", g, name, f[name])
		}
		return n, nil
	}
	gb := persistence.GroupBackup{Group: g, Snapshot: []byte(f["snapshot"])}
	var vals [5]uint64
	for i, name := range []string{"group", "groups", "index", "term", "lock_stripes"} {
		n, err := num(name)
		if err != nil {
			return gb, 0, 0, err
		}
		vals[i] = n
	}
	if vals[0] != uint64(g) || vals[1] < 1 || vals[1] > 1024 || vals[4] < 1 || vals[4] > 1<<16 {
		return gb, 0, 0, fmt.Errorf("RAFT.BACKUP %d: group %d of %d, %d lock stripes", g, vals[0], vals[1], vals[4])
	}
	gb.Index, gb.Term = vals[2], vals[3]
	return gb, int(vals[1]), int(vals[4]), nil
}

// writeArchiveFile writes the archive to path whole and durably.
func writeArchiveFile(path string, info persistence.ArchiveInfo, groups []persistence.GroupBackup) error {
	if err := atomicfile.Write(path, func(w io.Writer) error { return persistence.WriteArchive(w, info, groups) }); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// readArchiveFile reads an archive and checks it whole: every checksum,
// and every group's snapshot decoded to the digest recorded for it.
func readArchiveFile(path string) (persistence.ArchiveInfo, []persistence.GroupBackup, error) {
	f, err := os.Open(path)
	if err != nil {
		return persistence.ArchiveInfo{}, nil, err
	}
	defer f.Close()
	info, groups, err := persistence.ReadArchive(f)
	if err != nil {
		return info, nil, fmt.Errorf("%s is refused: %w", path, err)
	}
	for _, g := range groups {
		if err := persistence.VerifyGroup(g, info.LockStripes); err != nil {
			return info, nil, fmt.Errorf("%s is refused: %w", path, err)
		}
	}
	return info, groups, nil
}

func runInspect(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("sluice inspect", flag.ContinueOnError)
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("inspect: usage: sluice inspect FILE")
	}
	path := fs.Arg(0)
	info, groups, err := readArchiveFile(path)
	if err != nil {
		return fmt.Errorf("inspect: %w", err)
	}
	fmt.Fprintf(stdout, "archive: %s\n", path)
	fmt.Fprintf(stdout, "created: %s\n", info.Created.Format(time.RFC3339Nano))
	fmt.Fprintf(stdout, "source: %s\n", info.Source)
	fmt.Fprintf(stdout, "server_version: %s\n", info.Version)
	fmt.Fprintf(stdout, "groups: %d\n", info.Groups)
	fmt.Fprintf(stdout, "lock_stripes: %d\n", info.LockStripes)
	fmt.Fprintf(stdout, "keys: %d\n", info.Keys)
	fmt.Fprintf(stdout, "digest: %s %d\n", hex.EncodeToString(info.Digest[:]), info.Keys)
	for _, g := range groups {
		fmt.Fprintf(stdout, "group %d: applied_index=%d term=%d keys=%d clock_last=%d clock_offset=%d clock_frozen=%v snapshot_bytes=%d digest=%s\n",
			g.Group, g.Index, g.Term, g.Keys, g.Clock.Last, g.Clock.Offset, g.Clock.Frozen, len(g.Snapshot), hex.EncodeToString(g.Digest[:]))
	}
	fmt.Fprintln(stdout, "verified: every checksum, and every group's snapshot decodes to its recorded digest")
	return nil
}

func runRestore(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("sluice restore", flag.ContinueOnError)
	fs.SetOutput(stderr)
	in := fs.String("in", "", "the archive to restore (required)")
	dataDir := fs.String("data-dir", "", "the new node's data dir: must not exist or be empty (required)")
	id := fs.String("id", "", "the new node's --id (required)")
	peersFlag := fs.String("peers", "", "the new cluster's voters: id=raft-addr,... (required; the same on every node)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *in == "" || *dataDir == "" || *id == "" || *peersFlag == "" || fs.NArg() != 0 {
		return errors.New("restore: usage: sluice restore --in FILE --data-dir DIR --id ID --peers id=raft-addr,...")
	}
	peers, err := parsePeers(*peersFlag)
	if err != nil {
		return fmt.Errorf("restore: --peers: %w", err)
	}
	if _, ok := peers[*id]; !ok {
		return fmt.Errorf("restore: --id %s is not one of --peers", *id)
	}
	info, groups, err := readArchiveFile(*in)
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	if err := restoreDataDir(*dataDir, info, groups, peers); err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	fmt.Fprintf(stdout, "restored %d groups, %d keys (digest %s) into %s for node %s of %d; start it with --shards %d --lock-stripes %d --data-dir %s --id %s --peers %s\n",
		info.Groups, info.Keys, hex.EncodeToString(info.Digest[:]), *dataDir, *id, len(peers), info.Groups, info.LockStripes, *dataDir, *id, *peersFlag)
	return nil
}

// restoredClusterID is the identity of the cluster a restore makes
// (cluster/peer/identity.go): the same on every node restored from one archive
// with one --peers, and another for any other archive or member list.
func restoredClusterID(info persistence.ArchiveInfo, peers map[string]string) string {
	h := sha256.New()
	h.Write(info.Digest[:])
	h.Write([]byte(info.Created.Format(time.RFC3339Nano)))
	for _, id := range slices.Sorted(maps.Keys(peers)) {
		h.Write([]byte("\x00" + id + "=" + peers[id]))
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// restoreTerm is the Raft term a restored snapshot carries: a new cluster's
// first.
const restoreTerm = 1

// restoreDataDir makes dir the data dir of a node of a new cluster whose
// voters are peers, holding the archive's state: for each group, a Raft
// snapshot at the backup's applied index whose configuration is peers,
// and no log and no Raft stable state (term, vote) at all. The node starts
// on it as on any data dir with a snapshot: Raft restores the snapshot,
// and the peers elect a leader among themselves. The snapshots lose the
// leader addresses the source's log had announced (the new members
// announce their own), so nothing leads a restored node to the old
// cluster's nodes, and the data dir records a new cluster identity, which
// keeps the new cluster and the old one from talking at all.
func restoreDataDir(dir string, info persistence.ArchiveInfo, groups []persistence.GroupBackup, peers map[string]string) error {
	if ents, err := os.ReadDir(dir); err == nil && len(ents) > 0 {
		return fmt.Errorf("data dir %s is not empty: a restore makes a new node, on an empty (or missing) data dir", dir)
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("data dir %s: %w", dir, err)
	}
	if err := persistence.ClaimShards(dir, info.Groups); err != nil {
		return err
	}
	if err := persistence.WriteClusterID(dir, restoredClusterID(info, peers)); err != nil {
		return err
	}
	var conf raft.Configuration
	for _, id := range slices.Sorted(maps.Keys(peers)) {
		conf.Servers = append(conf.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(id), Address: raft.ServerAddress(peers[id])})
	}
	_, trans := raft.NewInmemTransport("")
	defer trans.Close()
	for _, g := range groups {
		gdir, err := persistence.OpenDataDir(persistence.GroupDir(dir, g.Group))
		if err != nil {
			return err
		}
		snap, err := persistence.RewriteMeta(g.Snapshot, func(meta [][2]string) [][2]string {
			var out [][2]string
			for _, kv := range meta {
				switch {
				case kv[0] == "applied":
					out = append(out, [2]string{kv[0], strconv.FormatUint(g.Index, 10)})
				case strings.HasPrefix(kv[0], "leader."):
				default:
					out = append(out, kv)
				}
			}
			return out
		})
		if err != nil {
			return fmt.Errorf("group %d: %w", g.Group, err)
		}
		store, err := raft.NewFileSnapshotStoreWithLogger(gdir.SnapshotBase(), 2, hclog.NewNullLogger())
		if err != nil {
			return fmt.Errorf("group %d: snapshot store: %w", g.Group, err)
		}
		index := max(g.Index, 1)
		sink, err := store.Create(raft.SnapshotVersionMax, index, restoreTerm, conf, index, trans)
		if err != nil {
			return fmt.Errorf("group %d: create the snapshot: %w", g.Group, err)
		}
		if _, err := sink.Write(snap); err != nil {
			sink.Cancel()
			return fmt.Errorf("group %d: write the snapshot: %w", g.Group, err)
		}
		if err := sink.Close(); err != nil {
			return fmt.Errorf("group %d: write the snapshot: %w", g.Group, err)
		}
	}
	return atomicfile.SyncDir(filepath.Clean(dir))
}

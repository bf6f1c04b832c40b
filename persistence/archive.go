package persistence

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"time"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/cursor"
)

// A backup archive (sluice backup, docs/operations.md "Backup and restore")
// holds one snapshot per Raft group of a cluster, each taken through its
// group's log, with what is needed to check it and to restore it:
//
//	archive = magic "SLUICEBK" | uvarint version (1) | info | group* | end
//	frame   = as in a snapshot: type byte | uvarint length | payload |
//	          crc32c(type, payload) LE32
//	info    = type 'I'; payload: varint created (Unix ns) | string source |
//	          string server version | uvarint groups | uvarint lock stripes |
//	          digest (32 bytes) | uvarint keys
//	group   = type 'G'; payload: uvarint group | uvarint applied index |
//	          uvarint term | varint clock offset | frozen byte |
//	          varint frozenAt | varint last | digest (32 bytes) |
//	          uvarint keys | uvarint snapshot length | sha256 of the
//	          snapshot (32 bytes); then data frames
//	data    = type 'D'; payload: up to 1 MiB of the group's snapshot stream
//	end     = type 'Z'; payload: uvarint groups
//
// The groups come in order, 0 to groups-1, each once. A group's digest is
// what DEBUG DIGEST's engine.Digest gives for its state (decoded into an
// engine of the recorded lock stripes); the info digest is DEBUG DIGEST's
// for the whole node: the group's own with one group, else the SHA-256 of
// the groups' digests in order. ReadArchive checks every checksum, every
// length and the structure; VerifyGroup decodes a snapshot and checks its
// digest.

// ArchiveMagic opens every backup archive.
const ArchiveMagic = "SLUICEBK"

// ArchiveVersion is the archive format version WriteArchive writes.
const ArchiveVersion = 1

// archiveChunk is the most snapshot bytes one data frame carries.
const archiveChunk = 1 << 20

// Archive frame types.
const (
	frameInfo  = 'I'
	frameGroup = 'G'
	frameData  = 'D'
	frameFin   = 'Z'
)

// ErrNotArchive: the stream does not start with ArchiveMagic.
var ErrNotArchive = errors.New("not a sluice backup archive")

// ArchiveInfo describes a whole archive.
type ArchiveInfo struct {
	Created     time.Time // when the backup finished
	Source      string    // the address it was taken from
	Version     string    // the version of the node that answered
	Groups      int       // Raft groups (--shards)
	LockStripes int       // the engine's lock stripes, which DEBUG DIGEST depends on
	Digest      [sha256.Size]byte
	Keys        int64
}

// GroupBackup is one Raft group's part of an archive.
type GroupBackup struct {
	Group    int
	Index    uint64 // the applied index the snapshot was taken at
	Term     uint64
	Clock    engine.ClockState
	Digest   [sha256.Size]byte
	Keys     int64
	Snapshot []byte // a snapshot stream (Encode's format)
}

// CombineDigests is DEBUG DIGEST's digest of a node from its groups'.
func CombineDigests(groups [][sha256.Size]byte) [sha256.Size]byte {
	if len(groups) == 1 {
		return groups[0]
	}
	h := sha256.New()
	for _, d := range groups {
		h.Write(d[:])
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}

// WriteArchive writes an archive of groups (in order, group g at index g)
// to w.
func WriteArchive(w io.Writer, info ArchiveInfo, groups []GroupBackup) error {
	if info.Groups != len(groups) || len(groups) == 0 {
		return fmt.Errorf("persistence: archive of %d groups says %d", len(groups), info.Groups)
	}
	bw := bufio.NewWriterSize(w, 256<<10)
	bw.WriteString(ArchiveMagic)
	bw.Write(binary.AppendUvarint(nil, ArchiveVersion))
	p := binary.AppendVarint(nil, info.Created.UnixNano())
	p = appendString(p, info.Source)
	p = appendString(p, info.Version)
	p = binary.AppendUvarint(p, uint64(info.Groups))
	p = binary.AppendUvarint(p, uint64(info.LockStripes))
	p = append(p, info.Digest[:]...)
	p = binary.AppendUvarint(p, uint64(info.Keys))
	writeFrameTo(bw, frameInfo, p)
	for i, g := range groups {
		if g.Group != i {
			return fmt.Errorf("persistence: archive group %d at position %d", g.Group, i)
		}
		sum := sha256.Sum256(g.Snapshot)
		p := binary.AppendUvarint(nil, uint64(g.Group))
		p = binary.AppendUvarint(p, g.Index)
		p = binary.AppendUvarint(p, g.Term)
		p = appendClock(p, g.Clock)
		p = append(p, g.Digest[:]...)
		p = binary.AppendUvarint(p, uint64(g.Keys))
		p = binary.AppendUvarint(p, uint64(len(g.Snapshot)))
		p = append(p, sum[:]...)
		writeFrameTo(bw, frameGroup, p)
		for off := 0; off < len(g.Snapshot); off += archiveChunk {
			writeFrameTo(bw, frameData, g.Snapshot[off:min(off+archiveChunk, len(g.Snapshot))])
		}
	}
	writeFrameTo(bw, frameFin, binary.AppendUvarint(nil, uint64(len(groups))))
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("persistence: write archive: %w", err)
	}
	return nil
}

// appendClock appends a clock state as a snapshot header's payload starts.
func appendClock(p []byte, cs engine.ClockState) []byte {
	p = binary.AppendVarint(p, cs.Offset)
	if cs.Frozen {
		p = append(p, 1)
	} else {
		p = append(p, 0)
	}
	p = binary.AppendVarint(p, cs.FrozenAt)
	return binary.AppendVarint(p, cs.Last)
}

// writeFrameTo writes one frame; bufio.Writer keeps the first error, which
// Flush returns.
func writeFrameTo(w *bufio.Writer, typ byte, p []byte) {
	w.WriteByte(typ)
	w.Write(binary.AppendUvarint(nil, uint64(len(p))))
	w.Write(p)
	crc := crc32.Update(0, castagnoli, []byte{typ})
	crc = crc32.Update(crc, castagnoli, p)
	var sum [4]byte
	binary.LittleEndian.PutUint32(sum[:], crc)
	w.Write(sum[:])
}

// maxArchiveGroups bounds the groups an archive may declare (cluster's
// MaxShards is 64).
const maxArchiveGroups = 1024

// ReadArchive reads and checks a whole archive: the magic and version,
// every frame's checksum, the groups in order, each snapshot's length and
// SHA-256, the end frame, and that nothing follows it. Errors wrap
// ErrNotArchive, ErrVersion, ErrTruncated or ErrCorrupt and say what was
// wrong. It does not decode the snapshots (VerifyGroup does).
func ReadArchive(r io.Reader) (ArchiveInfo, []GroupBackup, error) {
	info, groups, err := readArchive(&decoder{r: bufio.NewReaderSize(r, 256<<10)})
	if err != nil {
		return ArchiveInfo{}, nil, fmt.Errorf("persistence: read archive: %w", err)
	}
	return info, groups, nil
}

func readArchive(d *decoder) (ArchiveInfo, []GroupBackup, error) {
	var magic [len(ArchiveMagic)]byte
	if n, err := io.ReadFull(d.r, magic[:]); err != nil {
		if string(magic[:n]) == ArchiveMagic[:n] && n > 0 {
			return ArchiveInfo{}, nil, fmt.Errorf("%w: %d bytes, in the magic", ErrTruncated, n)
		}
		return ArchiveInfo{}, nil, fmt.Errorf("%w: too short", ErrNotArchive)
	}
	if string(magic[:]) != ArchiveMagic {
		return ArchiveInfo{}, nil, fmt.Errorf("%w: bad magic %q", ErrNotArchive, magic[:])
	}
	d.offset = int64(len(ArchiveMagic))
	v, err := binary.ReadUvarint(d.r)
	if err != nil {
		return ArchiveInfo{}, nil, d.readErr("version", err)
	}
	d.offset++
	if v != ArchiveVersion {
		return ArchiveInfo{}, nil, fmt.Errorf("%w: archive version %d (this build reads version %d)", ErrVersion, v, ArchiveVersion)
	}
	typ, p, err := d.frame()
	if err != nil {
		return ArchiveInfo{}, nil, err
	}
	if typ != frameInfo {
		return ArchiveInfo{}, nil, fmt.Errorf("%w: first frame is %q, want the info frame", ErrCorrupt, typ)
	}
	info, err := parseInfo(p)
	if err != nil {
		return ArchiveInfo{}, nil, err
	}
	var groups []GroupBackup
	var cur *GroupBackup
	var want uint64
	var wantSum [sha256.Size]byte
	finish := func() error {
		if cur == nil {
			return nil
		}
		if uint64(len(cur.Snapshot)) != want {
			return fmt.Errorf("%w: group %d has %d snapshot bytes, its header says %d", ErrCorrupt, cur.Group, len(cur.Snapshot), want)
		}
		if sha256.Sum256(cur.Snapshot) != wantSum {
			return fmt.Errorf("%w: group %d: the snapshot's SHA-256 does not match", ErrCorrupt, cur.Group)
		}
		groups = append(groups, *cur)
		cur = nil
		return nil
	}
	for {
		typ, p, err := d.frame()
		if err != nil {
			return ArchiveInfo{}, nil, err
		}
		switch typ {
		case frameGroup:
			if err := finish(); err != nil {
				return ArchiveInfo{}, nil, err
			}
			g, n, sum, err := parseGroup(p)
			if err != nil {
				return ArchiveInfo{}, nil, err
			}
			if g.Group != len(groups) || g.Group >= info.Groups {
				return ArchiveInfo{}, nil, fmt.Errorf("%w: group %d where group %d of %d was due", ErrCorrupt, g.Group, len(groups), info.Groups)
			}
			cur, want, wantSum = &g, n, sum
		case frameData:
			if cur == nil {
				return ArchiveInfo{}, nil, fmt.Errorf("%w: a data frame outside a group", ErrCorrupt)
			}
			if uint64(len(cur.Snapshot))+uint64(len(p)) > want {
				return ArchiveInfo{}, nil, fmt.Errorf("%w: group %d has more snapshot bytes than its header's %d", ErrCorrupt, cur.Group, want)
			}
			cur.Snapshot = append(cur.Snapshot, p...)
		case frameFin:
			if err := finish(); err != nil {
				return ArchiveInfo{}, nil, err
			}
			c := cursor.New(p, ErrCorrupt, "malformed end frame")
			n := c.Uvarint()
			if c.Err != nil || len(c.B) != 0 || n != uint64(len(groups)) || len(groups) != info.Groups {
				return ArchiveInfo{}, nil, fmt.Errorf("%w: the archive ends after %d of %d groups", ErrCorrupt, len(groups), info.Groups)
			}
			if _, err := d.r.ReadByte(); err != io.EOF {
				return ArchiveInfo{}, nil, fmt.Errorf("%w: bytes after the end frame", ErrCorrupt)
			}
			digests := make([][sha256.Size]byte, len(groups))
			for i, g := range groups {
				digests[i] = g.Digest
			}
			if CombineDigests(digests) != info.Digest {
				return ArchiveInfo{}, nil, fmt.Errorf("%w: the archive's digest is not its groups' digests combined", ErrCorrupt)
			}
			return info, groups, nil
		default:
			return ArchiveInfo{}, nil, fmt.Errorf("%w: unknown frame type %q", ErrCorrupt, typ)
		}
	}
}

func parseInfo(p []byte) (ArchiveInfo, error) {
	c := cursor.New(p, ErrCorrupt, "malformed info frame")
	var info ArchiveInfo
	info.Created = time.Unix(0, c.Varint()).UTC()
	info.Source = string(c.Bytes(MaxMetaLen))
	info.Version = string(c.Bytes(MaxMetaLen))
	groups := c.Uvarint()
	stripes := c.Uvarint()
	copy(info.Digest[:], fixed(&c, sha256.Size))
	keys := c.Uvarint()
	if c.Err != nil {
		return ArchiveInfo{}, c.Err
	}
	if len(c.B) != 0 || groups < 1 || groups > maxArchiveGroups || stripes < 1 || stripes > 1<<16 || keys > 1<<62 {
		return ArchiveInfo{}, fmt.Errorf("%w: info frame: %d groups, %d lock stripes, %d keys", ErrCorrupt, groups, stripes, keys)
	}
	info.Groups, info.LockStripes, info.Keys = int(groups), int(stripes), int64(keys)
	return info, nil
}

func parseGroup(p []byte) (GroupBackup, uint64, [sha256.Size]byte, error) {
	c := cursor.New(p, ErrCorrupt, "malformed group frame")
	var g GroupBackup
	var sum [sha256.Size]byte
	group := c.Uvarint()
	g.Index = c.Uvarint()
	g.Term = c.Uvarint()
	g.Clock.Offset = c.Varint()
	frozen := c.Byte()
	g.Clock.Frozen = frozen == 1
	g.Clock.FrozenAt = c.Varint()
	g.Clock.Last = c.Varint()
	copy(g.Digest[:], fixed(&c, sha256.Size))
	keys := c.Uvarint()
	n := c.Uvarint()
	copy(sum[:], fixed(&c, sha256.Size))
	if c.Err != nil {
		return GroupBackup{}, 0, sum, c.Err
	}
	if len(c.B) != 0 || frozen > 1 || group >= maxArchiveGroups || keys > 1<<62 || n > 1<<40 {
		return GroupBackup{}, 0, sum, fmt.Errorf("%w: group frame fields out of range", ErrCorrupt)
	}
	g.Group, g.Keys = int(group), int64(keys)
	return g, n, sum, nil
}

// DigestSnapshot decodes a snapshot stream into an engine of lockStripes
// lock stripes and returns its clock, what engine.Digest gives for it (DEBUG
// DIGEST's digest of that state) and its key count.
func DigestSnapshot(snap []byte, lockStripes int) (engine.ClockState, [sha256.Size]byte, int, error) {
	eng := engine.New(engine.Config{Stripes: lockStripes, MaxLogLimit: MaxLogLen})
	h, err := Decode(bytes.NewReader(snap), eng.Import)
	if err != nil {
		return engine.ClockState{}, [sha256.Size]byte{}, 0, err
	}
	eng.SetClockState(h.Clock)
	sum, keys := eng.Digest()
	return h.Clock, sum, keys, nil
}

// VerifyGroup decodes g's snapshot into an engine of lockStripes stripes
// and checks that its clock, digest and key count are the ones recorded.
func VerifyGroup(g GroupBackup, lockStripes int) error {
	clock, sum, keys, err := DigestSnapshot(g.Snapshot, lockStripes)
	if err != nil {
		return fmt.Errorf("group %d: %w", g.Group, err)
	}
	if clock != g.Clock {
		return fmt.Errorf("group %d: %w: the snapshot's clock %+v is not the recorded %+v", g.Group, ErrCorrupt, clock, g.Clock)
	}
	if sum != g.Digest || int64(keys) != g.Keys {
		return fmt.Errorf("group %d: %w: the snapshot's digest (%x, %d keys) is not the recorded one (%x, %d keys)",
			g.Group, ErrCorrupt, sum[:8], keys, g.Digest[:8], g.Keys)
	}
	return nil
}

// RewriteMeta returns snap with its header's meta pairs replaced by what
// edit returns; the clock and the records are kept byte for byte (the
// records are stored relative to the clock, which must not change).
func RewriteMeta(snap []byte, edit func([][2]string) [][2]string) ([]byte, error) {
	d := decoder{r: bufio.NewReader(bytes.NewReader(snap))}
	version, _, err := d.snapshotHead()
	if err != nil {
		return nil, fmt.Errorf("persistence: rewrite snapshot header: %w", err)
	}
	typ, p, err := d.frame()
	if err != nil {
		return nil, fmt.Errorf("persistence: rewrite snapshot header: %w", err)
	}
	if typ != frameHeader {
		return nil, fmt.Errorf("persistence: rewrite snapshot header: %w: first frame is %q", ErrCorrupt, typ)
	}
	h, err := parseHeader(p)
	if err != nil {
		return nil, fmt.Errorf("persistence: rewrite snapshot header: %w", err)
	}
	rest := snap[d.offset:]
	h.Meta = edit(h.Meta)
	var buf bytes.Buffer
	bw := bufio.NewWriter(&buf)
	bw.WriteString(Magic)
	bw.Write(binary.AppendUvarint(nil, version))
	np := appendClock(nil, h.Clock)
	np = binary.AppendUvarint(np, uint64(len(h.Meta)))
	for _, kv := range h.Meta {
		np = appendString(np, kv[0])
		np = appendString(np, kv[1])
	}
	writeFrameTo(bw, frameHeader, np)
	bw.Write(rest)
	if err := bw.Flush(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// fixed reads n bytes.
func fixed(c *cursor.Cursor, n int) []byte {
	if c.Err != nil {
		return nil
	}
	if len(c.B) < n {
		c.Fail("fixed-size field")
		return nil
	}
	v := c.B[:n:n]
	c.B = c.B[n:]
	return v
}

// snapshotHead reads a snapshot's magic and version; it returns the
// version and the offset after them.
func (d *decoder) snapshotHead() (uint64, int64, error) {
	var magic [len(Magic)]byte
	if _, err := io.ReadFull(d.r, magic[:]); err != nil || string(magic[:]) != Magic {
		return 0, 0, fmt.Errorf("%w: bad magic", ErrNotSnapshot)
	}
	v, err := binary.ReadUvarint(d.r)
	if err != nil {
		return 0, 0, d.readErr("version", err)
	}
	if v < minVersion || v > Version {
		return 0, 0, fmt.Errorf("%w: version %d", ErrVersion, v)
	}
	var enc [binary.MaxVarintLen64]byte
	d.offset = int64(len(Magic) + binary.PutUvarint(enc[:], v))
	return v, d.offset, nil
}

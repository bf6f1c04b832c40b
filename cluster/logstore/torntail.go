package logstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"

	"github.com/hashicorp/raft-wal/metadb"
)

// A torn log tail (docs/operations.md, "Disk faults").
//
// raft-wal appends a batch of entries as one write: the entry frames, then
// a commit frame holding the CRC of everything since the previous commit,
// then (in --fsync always) an fsync, and only then does the append return.
// A crash during that write (a power loss, a kernel crash) can leave the
// batch torn: some of its bytes on disk, others not. On open, raft-wal
// silently keeps the log up to the last commit whose CRC verifies and
// ignores what follows.
//
// Whether dropping that batch is safe depends on whether it was ever
// acknowledged. An entry on a node is acknowledged when its append
// returned: a follower then tells the leader it has it (the leader counts
// it towards the majority that commits it), a leader counts itself, and a
// single node answers its clients. With --fsync always an append returns
// only after the fsync, so a batch torn by a crash had not returned: never
// acknowledged, and dropping it loses nothing anyone was promised (a
// leader re-sends it, or it was never committed). With --fsync everysec or
// no an append returns once the bytes are written to the operating system,
// before they reach the disk, so a batch a power loss tore may have been
// acknowledged: dropping it silently could lose a committed decision (and
// on a single node, one a client was told was made). A process crash
// (kill -9) never tears anything: the bytes are in the kernel's page cache.
//
// Damage before the last batch (a commit frame other than the last one
// whose CRC fails, with later batches after it) is never a torn write: an
// append starts only after the previous one returned, so those batches
// were acknowledged.
//
// So checkTornTail, before the wal store is first opened: drops a torn
// last batch with --fsync always (zeroing its bytes, so that the file
// holds what raft-wal will use, and logging what it dropped); and refuses
// to start, saying why and what to do, when the node runs in a lazy mode
// or when the damage is not at the tail. The bolt store has no torn tail:
// its transactions commit by a meta page switch, and a torn one is rolled
// back by bolt as if it never began (also never acknowledged).

// tornTail describes the tail of a segment file.
type tornTail struct {
	file       string
	validEnd   int64 // just after the last commit frame that verifies
	scanEnd    int64 // just after the last frame read
	torn       int   // entry frames after validEnd
	badCommit  bool  // a commit frame whose CRC fails ends the valid part
	laterCommt int   // commit frames after a failed one: damage before the tail
}

// raft-wal's segment format (segment/format.go, v0.4.2).
const (
	walFileHeaderLen  = 32
	walFrameHeaderLen = 8
	walFrameEntry     = 1
	walFrameIndex     = 2
	walFrameCommit    = 3
	walMaxEntry       = 64 << 20
)

var walCRC = crc32.MakeTable(crc32.Castagnoli)

// checkTornTail checks the tail segment of the wal store in dir (see
// above). lazy says whether appends return before the fsync (--fsync
// everysec or no).
func checkTornTail(dir string, lazy bool) (dropped int, err error) {
	if _, err := os.Stat(filepath.Join(dir, "wal-meta.db")); errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	meta := &metadb.BoltMetaDB{}
	st, err := meta.Load(dir)
	meta.Close()
	if err != nil {
		return 0, fmt.Errorf("read the segment list: %w", err)
	}
	if len(st.Segments) == 0 {
		return 0, nil
	}
	tail := st.Segments[len(st.Segments)-1]
	if !tail.SealTime.IsZero() {
		return 0, nil
	}
	path := filepath.Join(dir, fmt.Sprintf("%020d-%016x.wal", tail.BaseIndex, tail.ID))
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer f.Close()
	t, err := scanTail(f)
	if err != nil {
		return 0, fmt.Errorf("scan %s: %w", path, err)
	}
	t.file = path
	if t.torn == 0 && !t.badCommit {
		return 0, nil
	}
	switch {
	case t.laterCommt > 0:
		return 0, fmt.Errorf("the raft log segment %s is damaged before its last batch (a commit frame at offset %d fails its checksum and %d batches follow it): those entries were acknowledged, so this node will not drop them; "+
			"if the other nodes of the cluster are healthy, move this node's data dir away and let it rejoin empty (RAFT.JOIN), or restore a backup", path, t.validEnd, t.laterCommt)
	case lazy:
		return 0, fmt.Errorf("the raft log segment %s ends with a torn batch of %d entries (a write cut short by a crash): this node runs with --fsync everysec or no, so its appends return before the fsync and those entries may have been acknowledged; it will not drop them silently. "+
			"If the other nodes of the cluster are healthy, move this node's data dir away and let it rejoin empty (RAFT.JOIN); on a single node, start it once with --fsync always to drop the batch (losing what it held), or restore a backup", path, t.torn)
	}
	// --fsync always: the batch's append never returned. Zero its bytes
	// so that the file says what raft-wal keeps.
	zeros := make([]byte, min(t.scanEnd-t.validEnd, 1<<20))
	for off := t.validEnd; off < t.scanEnd; off += int64(len(zeros)) {
		n := min(int64(len(zeros)), t.scanEnd-off)
		if _, err := f.WriteAt(zeros[:n], off); err != nil {
			return 0, fmt.Errorf("drop the torn batch of %s: %w", path, err)
		}
	}
	if err := f.Sync(); err != nil {
		return 0, fmt.Errorf("drop the torn batch of %s: %w", path, err)
	}
	return t.torn, nil
}

// scanTail reads a segment's frames as raft-wal's recovery does and says
// where its valid part ends and what follows.
func scanTail(f *os.File) (tornTail, error) {
	var t tornTail
	t.validEnd = walFileHeaderLen
	off := int64(walFileHeaderLen)
	crcStart := int64(0) // the first commit covers the file header
	pending := 0         // entry frames since the last commit
	var hdr [walFrameHeaderLen]byte
	for {
		if _, err := f.ReadAt(hdr[:], off); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return t, err
		}
		typ, n := hdr[0], binary.LittleEndian.Uint32(hdr[4:])
		if typ == 0 || typ > walFrameCommit {
			break // zeros (never written) or garbage: the end
		}
		if typ == walFrameCommit {
			end := off + walFrameHeaderLen
			if t.badCommit {
				t.laterCommt++
			} else {
				buf := make([]byte, off-crcStart)
				if _, err := f.ReadAt(buf, crcStart); err != nil {
					return t, err
				}
				if crc32.Checksum(buf, walCRC) == n {
					t.validEnd, crcStart, pending = end, end, 0
				} else {
					t.badCommit = true
				}
			}
			off = end
			t.scanEnd = off
			continue
		}
		if n > walMaxEntry {
			break
		}
		if typ == walFrameEntry && !t.badCommit {
			pending++
		}
		off += walFrameHeaderLen + int64(n) + int64((8-n%8)%8)
		t.scanEnd = off
	}
	if t.badCommit || pending > 0 {
		t.torn = pending
	}
	if t.scanEnd < t.validEnd {
		t.scanEnd = t.validEnd
	}
	return t, nil
}

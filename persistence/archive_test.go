package persistence

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
)

// liveState returns the state of an engine after a few decisions on
// several kinds of limiter, as a snapshot holds it; seed varies it.
func liveState(seed int) (Header, []engine.Record) {
	eng := engine.New(engine.Config{Stripes: 4})
	now := int64(1_700_000_000_000_000_000)
	for i, kind := range []engine.Kind{engine.KindToken, engine.KindFixed, engine.KindSliding, engine.KindLog, engine.KindGCRA} {
		for j := range 3 + seed {
			key := []byte{byte('a' + i), byte('0' + j)}
			eng.Decide(now+int64(j)*1e6, key, engine.Rule{Kind: kind, Limit: 10, Period: 60e9}, int64(1+j%3))
		}
	}
	eng.Apply(now+1e9, []engine.Op{{Code: engine.OpTime}}, make([]engine.Result, 1))
	cs := eng.ClockState()
	var recs []engine.Record
	for i := range eng.NumStripes() {
		recs = append(recs, eng.ExportStripe(i, cs.Last)...)
	}
	return Header{Clock: cs}, recs
}

// sampleArchive builds an archive of groups groups, group g holding the
// sample records from g on, with digests computed as a backup does.
func sampleArchive(t testing.TB, groups int) (ArchiveInfo, []GroupBackup, []byte) {
	t.Helper()
	const stripes = 16
	info := ArchiveInfo{Created: time.Unix(1700000000, 5).UTC(), Source: "127.0.0.1:6379", Version: "test",
		Groups: groups, LockStripes: stripes}
	var gs []GroupBackup
	var digests [][sha256.Size]byte
	for g := range groups {
		h, recs := liveState(g)
		snap := encode(t, h, recs)
		gb := GroupBackup{Group: g, Index: uint64(100 + g), Term: 3, Clock: h.Clock, Snapshot: snap}
		_, sum, keys, err := DigestSnapshot(snap, stripes)
		if err != nil {
			t.Fatal(err)
		}
		gb.Digest, gb.Keys = sum, int64(keys)
		info.Keys += gb.Keys
		digests = append(digests, sum)
		gs = append(gs, gb)
	}
	info.Digest = CombineDigests(digests)
	var buf bytes.Buffer
	if err := WriteArchive(&buf, info, gs); err != nil {
		t.Fatal(err)
	}
	return info, gs, buf.Bytes()
}

func TestArchiveRoundTrip(t *testing.T) {
	for _, groups := range []int{1, 3} {
		info, gs, data := sampleArchive(t, groups)
		got, ggot, err := ReadArchive(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		if got != info {
			t.Errorf("info %+v, want %+v", got, info)
		}
		if len(ggot) != len(gs) {
			t.Fatalf("%d groups, want %d", len(ggot), len(gs))
		}
		for i := range gs {
			if ggot[i].Group != gs[i].Group || ggot[i].Index != gs[i].Index || ggot[i].Term != gs[i].Term ||
				ggot[i].Clock != gs[i].Clock || ggot[i].Digest != gs[i].Digest || ggot[i].Keys != gs[i].Keys ||
				!bytes.Equal(ggot[i].Snapshot, gs[i].Snapshot) {
				t.Errorf("group %d differs", i)
			}
			if err := VerifyGroup(ggot[i], info.LockStripes); err != nil {
				t.Errorf("group %d: %v", i, err)
			}
		}
		if groups == 1 && info.Digest != gs[0].Digest {
			t.Error("one group's archive digest is not the group's")
		}
	}
}

// TestArchiveCorruption: every single flipped byte and every truncation is
// refused with a classified error.
func TestArchiveCorruption(t *testing.T) {
	_, _, data := sampleArchive(t, 2)
	classified := func(err error) bool {
		return errors.Is(err, ErrCorrupt) || errors.Is(err, ErrTruncated) || errors.Is(err, ErrNotArchive) || errors.Is(err, ErrVersion)
	}
	for i := range data {
		bad := bytes.Clone(data)
		bad[i] ^= 0x41
		_, _, err := ReadArchive(bytes.NewReader(bad))
		if err == nil || !classified(err) {
			t.Fatalf("byte %d flipped: %v", i, err)
		}
	}
	for n := 0; n < len(data); n += 7 {
		_, _, err := ReadArchive(bytes.NewReader(data[:n]))
		if err == nil || !classified(err) {
			t.Fatalf("truncated to %d bytes: %v", n, err)
		}
	}
	if _, _, err := ReadArchive(bytes.NewReader(append(bytes.Clone(data), 0))); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a byte after the end: %v", err)
	}
}

// TestVerifyGroupDigest: a snapshot whose records do not give the recorded
// digest is refused.
func TestVerifyGroupDigest(t *testing.T) {
	_, gs, _ := sampleArchive(t, 1)
	g := gs[0]
	g.Digest[0] ^= 1
	if err := VerifyGroup(g, 16); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("wrong digest: %v", err)
	}
}

func TestRewriteMeta(t *testing.T) {
	h := sampleHeader()
	h.Meta = [][2]string{{"applied", "7"}, {"leader.n1", "a b"}}
	snap := encode(t, h, sampleRecords())
	out, err := RewriteMeta(snap, func(m [][2]string) [][2]string { return [][2]string{{"applied", "9"}} })
	if err != nil {
		t.Fatal(err)
	}
	h2, recs, err := decodeAll(bytes.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	if len(h2.Meta) != 1 || h2.Meta[0] != [2]string{"applied", "9"} || h2.Clock != h.Clock {
		t.Errorf("header %+v", h2)
	}
	if len(recs) != len(sampleRecords()) {
		t.Errorf("%d records, want %d", len(recs), len(sampleRecords()))
	}
}

// FuzzReadArchive: arbitrary bytes never panic ReadArchive, every error is
// classified, and what reads writes back to the same bytes.
func FuzzReadArchive(f *testing.F) {
	_, _, data := sampleArchive(f, 2)
	f.Add(data)
	f.Add([]byte(ArchiveMagic))
	f.Fuzz(func(t *testing.T, data []byte) {
		info, gs, err := ReadArchive(bytes.NewReader(data))
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrTruncated) &&
				!errors.Is(err, ErrNotArchive) && !errors.Is(err, ErrVersion) {
				t.Fatalf("unclassified error: %v", err)
			}
			return
		}
		var buf bytes.Buffer
		if err := WriteArchive(&buf, info, gs); err != nil {
			t.Fatal(err)
		}
		if _, _, err := ReadArchive(&buf); err != nil {
			t.Fatalf("rewritten archive: %v", err)
		}
	})
}

package persistence

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/sluice-rl/sluice/engine"
)

const now = int64(1_767_225_600_000_000_000) // 2026-01-01T00:00:00Z

// sampleRecords returns records of every kind, with extreme values.
func sampleRecords() []engine.Record {
	return []engine.Record{
		{Key: []byte("tok"), Rule: engine.Rule{Kind: engine.KindToken, Limit: 4, Period: 15e9}, A: 3e9, B: now - 5},
		{Key: []byte("leak"), Rule: engine.Rule{Kind: engine.KindLeaky, Limit: 1 << 53, Period: 1}, A: 1, B: now},
		{Key: []byte("fix"), Rule: engine.Rule{Kind: engine.KindFixed, Limit: 5, Period: 60e9}, A: now - now%60e9, B: 5},
		{Key: []byte("slide"), Rule: engine.Rule{Kind: engine.KindSliding, Limit: 7, Period: 60e9}, A: now - 18e9, B: 3, C: 5},
		{Key: []byte("log"), Rule: engine.Rule{Kind: engine.KindLog, Limit: 3, Period: 60e9}, Log: []int64{now - 59e9, now - 1, now}},
		{Key: []byte("gcra"), Rule: engine.Rule{Kind: engine.KindGCRA, Limit: 16, Period: 2e9}, A: now + 2e9},
		{Key: []byte{0, 0xff, '\r', '\n'}, Rule: engine.Rule{Kind: engine.KindToken, Limit: math.MaxInt64, Period: math.MinInt64},
			A: math.MinInt64, B: math.MaxInt64, C: -1},
		{Key: bytes.Repeat([]byte("k"), MaxKeyLen), Rule: engine.Rule{Kind: engine.KindLog, Limit: 2, Period: 1},
			Log: []int64{math.MinInt64, math.MaxInt64}},
		{Key: []byte("conc"), Rule: engine.Rule{Kind: engine.KindConcurrency, Limit: 5, Period: 30e9}, Leases: []engine.Lease{
			{Token: []byte("req-1"), Units: 2, Expiry: now + 1e9},
			{Token: bytes.Repeat([]byte{0xff}, engine.MaxToken), Units: 1, Expiry: now + 1e9},
			{Token: []byte{0}, Units: 1 << 53, Expiry: math.MaxInt64},
		}},
		{Key: []byte("str"), Rule: engine.Rule{Kind: engine.KindString}, A: now/1e6 + 5000, Value: []byte("12")},
		{Key: []byte("str2"), Rule: engine.Rule{Kind: engine.KindString}, Value: []byte{}},
	}
}

func sampleHeader() Header {
	return Header{
		Clock: engine.ClockState{Offset: 3_600_000_000_000, Frozen: true, FrozenAt: now - 7, Last: now},
		Meta:  [][2]string{{"applied", "42"}, {"addr.n1", "127.0.0.1:6001|127.0.0.1:8001"}, {"", ""}},
	}
}

func encode(t testing.TB, h Header, recs []engine.Record) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := Encode(&buf, h, func(int) []engine.Record { return recs }, 1); err != nil {
		t.Fatalf("Encode: %v", err)
	}
	return buf.Bytes()
}

func decodeAll(r io.Reader) (Header, []engine.Record, error) {
	var recs []engine.Record
	h, err := Decode(r, func(rec engine.Record) error {
		recs = append(recs, rec)
		return nil
	})
	return h, recs, err
}

func TestRoundTrip(t *testing.T) {
	many := make([]engine.Record, 20000) // several blocks
	for i := range many {
		many[i] = engine.Record{
			Key:  []byte(fmt.Sprintf("user:%d", i)),
			Rule: engine.Rule{Kind: engine.KindToken, Limit: int64(i%100 + 1), Period: 1e9},
			A:    int64(i) * 1e6, B: now - int64(i),
		}
	}
	bigLog := make([]int64, 100000)
	for i := range bigLog {
		bigLog[i] = now - int64(len(bigLog)-i)*1e6
	}
	tests := []struct {
		name string
		h    Header
		recs []engine.Record
	}{
		{"empty", Header{}, nil},
		{"samples", sampleHeader(), sampleRecords()},
		{"many", Header{Clock: engine.ClockState{Last: now}}, many},
		{"big log", Header{Clock: engine.ClockState{Last: now}}, []engine.Record{
			{Key: []byte("l"), Rule: engine.Rule{Kind: engine.KindLog, Limit: 100000, Period: 1e12}, Log: bigLog}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := encode(t, tt.h, tt.recs)
			h, recs, err := decodeAll(bytes.NewReader(data))
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if !reflect.DeepEqual(h.Clock, tt.h.Clock) || len(h.Meta) != len(tt.h.Meta) {
				t.Fatalf("header = %+v, want %+v", h, tt.h)
			}
			for i := range h.Meta {
				if h.Meta[i] != tt.h.Meta[i] {
					t.Fatalf("meta[%d] = %q, want %q", i, h.Meta[i], tt.h.Meta[i])
				}
			}
			if len(recs) != len(tt.recs) {
				t.Fatalf("%d records, want %d", len(recs), len(tt.recs))
			}
			for i := range recs {
				if !reflect.DeepEqual(recs[i], tt.recs[i]) {
					t.Fatalf("record %d = %+v, want %+v", i, recs[i], tt.recs[i])
				}
			}
			// One byte at a time: the decoder must not depend on read sizes.
			if _, recs2, err := decodeAll(iotest.OneByteReader(bytes.NewReader(data))); err != nil || len(recs2) != len(recs) {
				t.Fatalf("one byte at a time: %d records, %v", len(recs2), err)
			}
		})
	}
}

// TestCompact checks that timestamps near the clock cost a few bytes.
func TestCompact(t *testing.T) {
	recs := make([]engine.Record, 1000)
	for i := range recs {
		recs[i] = engine.Record{Key: []byte(fmt.Sprintf("k%04d", i)),
			Rule: engine.Rule{Kind: engine.KindToken, Limit: 100, Period: 1e7}, A: 5e8, B: now - 1e6}
	}
	data := encode(t, Header{Clock: engine.ClockState{Last: now}}, recs)
	if per := len(data) / len(recs); per > 24 {
		t.Fatalf("%d bytes per record, want <= 24", per)
	}
}

func TestEveryByteFlipped(t *testing.T) {
	data := encode(t, sampleHeader(), append(sampleRecords()[:6:6], sampleRecords()[9]))
	for i := range data {
		for _, mask := range []byte{0x01, 0x80, 0xff} {
			bad := bytes.Clone(data)
			bad[i] ^= mask
			_, _, err := decodeAll(bytes.NewReader(bad))
			if err == nil {
				t.Fatalf("byte %d ^ %#x: decoded without error", i, mask)
			}
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrTruncated) &&
				!errors.Is(err, ErrNotSnapshot) && !errors.Is(err, ErrVersion) {
				t.Fatalf("byte %d ^ %#x: unclassified error %v", i, mask, err)
			}
		}
	}
}

func TestTruncations(t *testing.T) {
	data := encode(t, sampleHeader(), sampleRecords()[:7])
	for n := 0; n < len(data); n++ {
		_, _, err := decodeAll(bytes.NewReader(data[:n]))
		switch {
		case err == nil:
			t.Fatalf("truncated to %d of %d bytes: no error", n, len(data))
		case n == 0 && !errors.Is(err, ErrNotSnapshot):
			t.Fatalf("empty: %v, want ErrNotSnapshot", err)
		case n > 0 && !errors.Is(err, ErrTruncated):
			t.Fatalf("truncated to %d of %d bytes: %v, want ErrTruncated", n, len(data), err)
		}
	}
}

func TestDecodeErrors(t *testing.T) {
	good := encode(t, sampleHeader(), sampleRecords()[:2])
	v5 := bytes.Clone(good)
	v5[len(Magic)] = 5
	tests := []struct {
		name string
		data []byte
		want error
		text string
	}{
		{"not a snapshot", []byte("*1\r\n$4\r\nPING\r\n"), ErrNotSnapshot, "bad magic"},
		{"future version", v5, ErrVersion, "version 5"},
		{"trailing garbage", append(bytes.Clone(good), 0), ErrCorrupt, "after the end frame"},
		{"huge frame length", append([]byte(Magic+"\x01H"), 0xff, 0xff, 0xff, 0xff, 0x0f), ErrCorrupt, "exceeds"},
		{"long frame length", append([]byte(Magic+"\x01H"), 0xff, 0xff, 0xff, 0x1f), ErrTruncated, "frame payload"},
		{"varint overflow", append([]byte(Magic+"\x01H"), bytes.Repeat([]byte{0xff}, 11)...), ErrCorrupt, "overflows"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := decodeAll(bytes.NewReader(tt.data))
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.text) {
				t.Fatalf("err = %v, want %v containing %q", err, tt.want, tt.text)
			}
		})
	}
}

// TestHostileLengths builds frames with valid checksums whose contents lie
// about lengths, which checksums alone cannot catch.
func TestHostileLengths(t *testing.T) {
	frame := func(typ byte, payload []byte) []byte {
		var buf bytes.Buffer
		buf.WriteByte(typ)
		buf.Write(appendUvarint(nil, uint64(len(payload))))
		buf.Write(payload)
		buf.Write(crcOf(typ, payload))
		return buf.Bytes()
	}
	header := frame(frameHeader, []byte{0, 0, 0, 0, 0})
	tests := []struct {
		name  string
		block []byte
		text  string
	}{
		{"record count beyond the bytes", append(appendUvarint(nil, 1<<40), 1, 2, 3), "claims"},
		{"unknown kind", []byte{1, 0x07, 0, 0, 0, 0, 0, 1, 'k'}, "unknown limiter kind 7"},
		{"kind none", []byte{1, 0x00, 0, 0, 0, 0, 0, 1, 'k'}, "unknown limiter kind 0"},
		{"empty key", []byte{1, 0x01, 0, 0, 0, 0, 0, 0, 0}, "empty key"},
		{"key too long", append([]byte{1, 0x01, 0, 0, 0, 0, 0}, appendUvarint(nil, MaxKeyLen+1)...), "exceeds"},
		{"key beyond the block", []byte{1, 0x01, 0, 0, 0, 0, 0, 100, 'k'}, "malformed string"},
		{"log count beyond the block", append([]byte{1, 0x81, 0, 0, 0, 0, 0, 1, 'k'}, appendUvarint(nil, 1<<33)...), "log of"},
		{"empty log flagged", []byte{1, 0x85, 0, 0, 0, 0, 0, 1, 'k', 0}, "log of 0"},
		{"stray bytes", []byte{1, 0x01, 0, 0, 0, 0, 0, 1, 'k', 9}, "stray"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := []byte(Magic + "\x01")
			data = append(data, header...)
			data = append(data, frame(frameBlock, tt.block)...)
			data = append(data, frame(frameEnd, []byte{1, 1})...)
			_, _, err := decodeAll(bytes.NewReader(data))
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tt.text) {
				t.Fatalf("err = %v, want ErrCorrupt containing %q", err, tt.text)
			}
		})
	}
}

func appendUvarint(b []byte, v uint64) []byte { return binary.AppendUvarint(b, v) }

func crcOf(typ byte, payload []byte) []byte {
	crc := crc32.Update(crc32.Update(0, castagnoli, []byte{typ}), castagnoli, payload)
	return binary.LittleEndian.AppendUint32(nil, crc)
}

func TestCallbackError(t *testing.T) {
	data := encode(t, sampleHeader(), sampleRecords())
	stop := errors.New("stop here")
	n := 0
	_, err := Decode(bytes.NewReader(data), func(engine.Record) error {
		n++
		if n == 3 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || !strings.Contains(err.Error(), "record 2") {
		t.Fatalf("err = %v, want the callback's error at record 2", err)
	}
}

func TestEncodeRejects(t *testing.T) {
	tests := []struct {
		name string
		rec  engine.Record
	}{
		{"no kind", engine.Record{Key: []byte("k")}},
		{"empty key", engine.Record{Rule: engine.Rule{Kind: engine.KindToken}}},
		{"long key", engine.Record{Key: make([]byte, MaxKeyLen+1), Rule: engine.Rule{Kind: engine.KindToken}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Encode(io.Discard, Header{}, func(int) []engine.Record { return []engine.Record{tt.rec} }, 1)
			if err == nil {
				t.Fatal("Encode accepted a record Decode would reject")
			}
		})
	}
}

func TestDataDir(t *testing.T) {
	root := filepath.Join(t.TempDir(), "a", "sluice-data")
	d, err := OpenDataDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{d.Root(), d.SnapshotDir()} {
		fi, err := os.Stat(dir)
		if err != nil {
			t.Fatal(err)
		}
		if perm := fi.Mode().Perm(); perm != 0o700 {
			t.Fatalf("%s: mode %v, want 0700", dir, perm)
		}
	}
	if d.HasState() {
		t.Fatal("a new data dir has state")
	}
	if err := os.WriteFile(d.RaftDB(), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if !d.HasState() || filepath.Dir(d.RaftDB()) != d.Root() || filepath.Dir(d.SnapshotDir()) != d.SnapshotBase() {
		t.Fatalf("layout: %+v", d)
	}
	if _, err := OpenDataDir(d.RaftDB()); err == nil {
		t.Fatal("a file was accepted as a data dir")
	}
	if _, err := OpenDataDir(""); err == nil {
		t.Fatal("an empty path was accepted")
	}
}

// TestVersion1Snapshots: snapshots written before the concurrency kind
// (format version 1, kept in the fuzz corpus) still load, and a version 1
// stream cannot carry a concurrency key.
func TestVersion1Snapshots(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("testdata", "fuzz", "FuzzDecodeSnapshot", "every-kind"))
	if err != nil {
		t.Fatal(err)
	}
	_, quoted, _ := strings.Cut(strings.TrimSpace(string(raw)), "[]byte(")
	v1, err := strconv.Unquote(strings.TrimSuffix(quoted, ")"))
	if err != nil {
		t.Fatal(err)
	}
	if v1[len(Magic)] != 1 {
		t.Fatalf("the corpus's every-kind is version %d, want 1", v1[len(Magic)])
	}
	h, recs, err := decodeAll(strings.NewReader(v1))
	if err != nil {
		t.Fatalf("version 1 snapshot: %v", err)
	}
	want := sampleHeader()
	want.Format = 1
	if !reflect.DeepEqual(h, want) || !reflect.DeepEqual(recs, sampleRecords()[:6]) {
		t.Fatalf("version 1 snapshot decoded to %+v %+v", h, recs)
	}
	// The same stream as version 1 but holding a concurrency key.
	v3 := sampleHeader()
	v3.Format = 3 // blocks as version 1 wrote them (no database)
	conc := encode(t, v3, sampleRecords()[8:9])
	conc[len(Magic)] = 1
	if _, _, err := decodeAll(bytes.NewReader(conc)); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "unknown limiter kind 7") {
		t.Fatalf("version 1 with a concurrency key: %v", err)
	}
	if _, recs, err := decodeAll(bytes.NewReader(encode(t, sampleHeader(), sampleRecords()[8:9]))); err != nil || !reflect.DeepEqual(recs, sampleRecords()[8:9]) {
		t.Fatalf("version 2 concurrency key: %+v, %v", recs, err)
	}
}

// TestEncodeOlderFormat: a header's Format asks for an older format
// version (what an older release reads, while the cluster version says one
// may be a member): the stream says that version, decodes to the same
// records, and a record the format cannot hold is refused.
func TestEncodeOlderFormat(t *testing.T) {
	h := sampleHeader()
	h.Format = 1
	b := encode(t, h, sampleRecords()[:6])
	if b[len(Magic)] != 1 {
		t.Fatalf("format %d written, want 1", b[len(Magic)])
	}
	got, recs, err := decodeAll(bytes.NewReader(b))
	if err != nil || got.Format != 1 || !reflect.DeepEqual(recs, sampleRecords()[:6]) {
		t.Fatalf("decoded %+v %+v, %v", got, recs, err)
	}
	var buf bytes.Buffer
	err = Encode(&buf, h, func(int) []engine.Record { return sampleRecords()[8:9] }, 1)
	if err == nil || !strings.Contains(err.Error(), "older format") {
		t.Fatalf("a concurrency key in format 1: %v", err)
	}
	h.Format = Version + 1
	if err := Encode(&buf, h, func(int) []engine.Record { return nil }, 1); err == nil {
		t.Fatal("a format this build does not know was written")
	}
	h.Format = 0
	if b := encode(t, h, nil); b[len(Magic)] != Version {
		t.Fatalf("format %d written by default, want %d", b[len(Magic)], Version)
	}
}

// TestVersion3Strings: string keys round-trip with their values and
// expiries, and a version 2 stream cannot carry one.
func TestVersion3Strings(t *testing.T) {
	strs := sampleRecords()[9:11]
	data := encode(t, sampleHeader(), strs)
	if _, recs, err := decodeAll(bytes.NewReader(data)); err != nil || !reflect.DeepEqual(recs, strs) {
		t.Fatalf("string keys: %+v, %v", recs, err)
	}
	v3 := sampleHeader()
	v3.Format = 3 // blocks as version 2 wrote them (no database)
	data = encode(t, v3, strs)
	data[len(Magic)] = 2
	if _, _, err := decodeAll(bytes.NewReader(data)); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "unknown limiter kind 8") {
		t.Fatalf("version 2 with a string key: %v", err)
	}
	bad := sampleRecords()[0]
	bad.Value = []byte("x")
	var buf bytes.Buffer
	if err := Encode(&buf, sampleHeader(), func(int) []engine.Record { return []engine.Record{bad} }, 1); err == nil {
		t.Fatal("a limiter record with a value was encoded")
	}
}

// TestVersion4Databases: records keep their database through a version 4
// stream (a block per database run), and a version 3 stream refuses a key
// of another database than 0.
func TestVersion4Databases(t *testing.T) {
	recs := sampleRecords()
	var in []engine.Record
	for i, r := range recs {
		r.DB = uint8([]int{0, 0, 3, 3, 15, 0, 1, 1, 2, 2, 0}[i%11])
		in = append(in, r)
	}
	data := encode(t, sampleHeader(), in)
	if _, got, err := decodeAll(bytes.NewReader(data)); err != nil || !reflect.DeepEqual(got, in) {
		t.Fatalf("databases: %v\ngot  %+v\nwant %+v", err, got, in)
	}
	v3 := sampleHeader()
	v3.Format = 3
	var buf bytes.Buffer
	enc, err := NewEncoder(&buf, v3)
	if err != nil {
		t.Fatal(err)
	}
	if err := enc.Write(in[2]); err == nil || !strings.Contains(err.Error(), "database 3") {
		t.Fatalf("a version 3 stream took a key of database 3: %v", err)
	}
}

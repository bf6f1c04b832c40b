package atomicfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// TestWriteReplacesWhole: a write replaces the file's contents and leaves
// no temporary file; a failed write leaves the old contents and no
// temporary file either.
func TestWriteReplacesWhole(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	if err := WriteFile(path, []byte("one\n")); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(path, []byte("two\n")); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err := Write(path, func(w io.Writer) error {
		_, _ = w.Write([]byte("partial"))
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Write = %v, want %v", err, boom)
	}
	if got, err := os.ReadFile(path); err != nil || string(got) != "two\n" {
		t.Fatalf("contents = %q, %v; want %q", got, err, "two\n")
	}
	if _, err := os.Stat(path + ".tmp"); !os.IsNotExist(err) {
		t.Fatalf("the temporary file is left: %v", err)
	}
}

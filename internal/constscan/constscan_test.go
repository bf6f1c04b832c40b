package constscan

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLiterals reads constants of one type with literal values, skips
// other types and test files, and refuses a member without its number.
func TestLiterals(t *testing.T) {
	for _, tc := range []struct {
		name, src, err string
		want           map[string]uint64
	}{
		{"literals", "package p\ntype Code uint8\nconst (\n\tA Code = 1\n\tB Code = 0x10\n\tC = 3\n)\nconst D Code = 7\n", "", map[string]uint64{"A": 1, "B": 16, "D": 7}},
		{"iota", "package p\ntype Code uint8\nconst (\n\tA Code = iota\n)\n", "not a literal", nil},
		{"none", "package p\nconst A = 1\n", "no constant of type Code", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "p.go"), []byte(tc.src), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "p_test.go"), []byte("package p\nconst Z Code = 9\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := Literals(dir, "Code")
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Fatalf("got %v, want %v", got, tc.want)
				}
			}
		})
	}
}

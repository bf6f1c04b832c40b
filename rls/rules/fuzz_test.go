package rules

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse feeds arbitrary files to the loader: it must return a Set or
// a *LoadError, never panic, and a loaded Set must answer look-ups built
// from the input.
func FuzzParse(f *testing.F) {
	for _, dir := range []string{"testdata/good", "testdata/bad"} {
		files, _ := filepath.Glob(filepath.Join(dir, "*.y*ml"))
		for _, p := range files {
			if b, err := os.ReadFile(p); err == nil {
				f.Add(b, "path", "/api/x")
			}
		}
	}
	f.Fuzz(func(t *testing.T, data []byte, key, value string) {
		s, err := Parse(map[string][]byte{"f.yaml": data})
		if err != nil {
			if _, ok := err.(*LoadError); !ok {
				t.Fatalf("error %T: %v", err, err)
			}
			return
		}
		for _, d := range s.Domains() {
			_ = s.Lookup(d.Name, []Entry{{Key: key, Value: value}})
			_ = s.Lookup(d.Name, []Entry{{Key: key, Value: value}, {Key: value, Value: key}})
		}
		_ = s.Version()
	})
}

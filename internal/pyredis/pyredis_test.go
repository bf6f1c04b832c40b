package pyredis

import (
	"os/exec"
	"testing"
)

// TestFind: a module that cannot exist is never found, and a path Find
// returns is a python3 that imports the module.
func TestFind(t *testing.T) {
	if got := Find("no_such_module_sluice_xyz"); got != "" {
		t.Errorf("Find(no such module) = %q, want \"\"", got)
	}
	path := Find("sys")
	if path == "" {
		t.Skip("no python3 here")
	}
	if err := exec.Command(path, "-c", "import sys").Run(); err != nil {
		t.Errorf("Find(sys) = %q, which cannot import sys: %v", path, err)
	}
}

package bench

import (
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"fmt"
)

//go:embed lua/*.lua
var luaFS embed.FS

// Script names, files under lua/.
const (
	AnchorScript = "anchor_token_bucket.lua"
)

// scriptFiles maps each algorithm to its script.
func scriptFile(a Algorithm) string {
	switch a {
	case AlgToken:
		return "token_bucket.lua"
	case AlgLeaky:
		return "leaky_bucket.lua"
	case AlgFixed:
		return "fixed_window.lua"
	case AlgSliding:
		return "sliding_window.lua"
	case AlgLog:
		return "sliding_log.lua"
	}
	return ""
}

// ScriptFor is the name of a's script under lua/.
func ScriptFor(a Algorithm) (string, bool) {
	f := scriptFile(a)
	return f, f != ""
}

// ScriptSource is the text of a script under lua/.
func ScriptSource(name string) (string, error) {
	b, err := luaFS.ReadFile("lua/" + name)
	if err != nil {
		return "", fmt.Errorf("lua script %s: %w", name, err)
	}
	return string(b), nil
}

// ScriptSHA is the SHA1 of a script under lua/, as EVALSHA names it; empty
// for an unknown script.
func ScriptSHA(name string) string {
	src, err := ScriptSource(name)
	if err != nil {
		return ""
	}
	sum := sha1.Sum([]byte(src))
	return hex.EncodeToString(sum[:])
}

// ScriptNames lists every script under lua/.
func ScriptNames() []string {
	names := []string{AnchorScript}
	for _, a := range Algorithms() {
		names = append(names, scriptFile(a))
	}
	return names
}

// LoadScripts loads every script into a Redis server with SCRIPT LOAD and
// checks that the server names each by the SHA1 computed here.
func LoadScripts(addr string) error {
	for _, name := range ScriptNames() {
		src, err := ScriptSource(name)
		if err != nil {
			return err
		}
		v, err := doAt(addr, "SCRIPT", "LOAD", src)
		if err != nil {
			return fmt.Errorf("SCRIPT LOAD %s: %w", name, err)
		}
		if want := ScriptSHA(name); v.Str != want {
			return fmt.Errorf("SCRIPT LOAD %s: server named it %q, want %q", name, v.Str, want)
		}
	}
	return nil
}

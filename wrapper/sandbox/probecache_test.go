package sandbox

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/wire"
)

// A stored probe serves while its key matches and it is younger than the
// TTL; a change of wrapper, boot, user or bwrap binary, an expired or
// future answer, or a damaged file means a new probe.
func TestProbeCache(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileProbeCache)
	key := probeKey{Version: "v1", Boot: "b1", UID: 1000, Bwrap: "/usr/bin/bwrap", BwrapMtime: 42}
	reply := wire.SandboxReply{Sandbox: wire.SandboxBwrap, Path: "/usr/bin/bwrap"}
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	if _, ok := cachedProbe(path, key, now); ok {
		t.Fatal("an answer before any was stored")
	}
	storeProbe(path, key, reply, now)
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("cache file: %v, %v; want mode 600", fi, err)
	}
	if got, ok := cachedProbe(path, key, now.Add(probeCacheTTL)); !ok || got != reply {
		t.Errorf("within the TTL: %+v, %v; want %+v", got, ok, reply)
	}
	for name, k := range map[string]probeKey{
		"other wrapper": {Version: "v2", Boot: "b1", UID: 1000, Bwrap: "/usr/bin/bwrap", BwrapMtime: 42},
		"reboot":        {Version: "v1", Boot: "b2", UID: 1000, Bwrap: "/usr/bin/bwrap", BwrapMtime: 42},
		"other user":    {Version: "v1", Boot: "b1", UID: 0, Bwrap: "/usr/bin/bwrap", BwrapMtime: 42},
		"other bwrap":   {Version: "v1", Boot: "b1", UID: 1000, Bwrap: "/opt/bwrap", BwrapMtime: 42},
		"bwrap updated": {Version: "v1", Boot: "b1", UID: 1000, Bwrap: "/usr/bin/bwrap", BwrapMtime: 43},
	} {
		if _, ok := cachedProbe(path, k, now); ok {
			t.Errorf("%s: the stored answer served", name)
		}
	}
	if _, ok := cachedProbe(path, key, now.Add(probeCacheTTL+time.Second)); ok {
		t.Error("an expired answer served")
	}
	if _, ok := cachedProbe(path, key, now.Add(-time.Second)); ok {
		t.Error("an answer from the future served")
	}
	os.WriteFile(path, []byte("{not json"), 0o600)
	if _, ok := cachedProbe(path, key, now); ok {
		t.Error("a damaged file served")
	}
}

// The sandbox's HOME gets the node user's git name and email, read in one
// git call, and nothing else of the global config.
func TestGitIdentity(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_CONFIG_HOME", "")
	os.WriteFile(filepath.Join(home, ".gitconfig"), []byte("[user]\n\tname = Ada Lovelace\n\temail = ada@example.com\n[core]\n\tfsmonitor = /tmp/evil\n"), 0o600)
	dst := t.TempDir()
	if err := GitIdentity(t.Context(), dst); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(filepath.Join(dst, ".gitconfig"))
	if want := "[user]\n\tname = \"Ada Lovelace\"\n\temail = \"ada@example.com\"\n"; string(got) != want {
		t.Errorf(".gitconfig = %q, want %q", got, want)
	}
	os.WriteFile(filepath.Join(home, ".gitconfig"), []byte("[core]\n\tbare = false\n"), 0o600)
	empty := t.TempDir()
	if err := GitIdentity(t.Context(), empty); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(empty, ".gitconfig")); err == nil {
		t.Error("a .gitconfig without an identity to write")
	}
}

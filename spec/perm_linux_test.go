package spec

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// TestLoadThroughASearchOnlyDirectory: a spec that links into a
// directory its user may search but not list (mode 0111 here, as 0711 is
// for another user) loads and snapshots as it did before links were
// opened through os.Root, which opens each directory on the way.
func TestLoadThroughASearchOnlyDirectory(t *testing.T) {
	dir := writeSpecs(t, map[string]string{"p/S01.md": "# a\n", "common/one.md": "# one\n"})
	if err := os.Symlink("../common/one.md", filepath.Join(dir, "p", "S02.md")); err != nil {
		t.Fatal(err)
	}
	common := filepath.Join(dir, "common")
	if err := os.Chmod(common, 0o111); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(common, 0o755) })
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // dies with the goroutine: its capabilities go with it
		hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		var data [2]unix.CapUserData
		if err := unix.Capget(&hdr, &data[0]); err != nil {
			done <- err
			return
		}
		data[0].Effective &^= 1<<unix.CAP_DAC_OVERRIDE | 1<<unix.CAP_DAC_READ_SEARCH
		if err := unix.Capset(&hdr, &data[0]); err != nil {
			done <- err
			return
		}
		if _, err := os.ReadDir(common); err == nil {
			t.Errorf("%s can still be listed: the test shows nothing", common)
		}
		p, err := Load(dir, "p")
		if err != nil {
			done <- err
			return
		}
		for _, tk := range p.Tasks {
			if _, err := p.Snapshot(tk); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	if err := <-done; err != nil {
		t.Fatalf("a spec linked into a 0111 directory: %v", err)
	}
}

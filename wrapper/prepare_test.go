package wrapper

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/slurmjob"
)

// TestPrepareDropsALeftoverSecretsFile: a previous attempt's secrets file
// its job never read goes when the next attempt is prepared, even when
// that one is refused (here its environment), so no secret outlives its
// attempt by more than one prepare.
func TestPrepareDropsALeftoverSecretsFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "p", "tasks", "S01")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	left := filepath.Join(dir, slurmjob.FileSecrets)
	if err := os.WriteFile(left, []byte(`[{"env":{"KEY":"old"}}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	item := wire.LaunchItem{Dir: dir, Env: map[string]string{"BAD=NAME": "v"}, Launch: wire.Launch{Project: "p", Task: "S01", Attempt: 2}}
	if err := prepareOne(item, map[string]bool{}); err == nil {
		t.Fatal("prepare took an invalid environment")
	}
	if _, err := os.Stat(left); !os.IsNotExist(err) {
		t.Errorf("the previous attempt's secrets file is still there (%v)", err)
	}
}

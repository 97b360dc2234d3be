package gitresult

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/internal/gittest"
)

// holdPlace takes checkout place i of dir as another supervisor would,
// until the returned function lets go.
func holdPlace(t *testing.T, dir string, i int) func() {
	t.Helper()
	return holdPlaceOf(t, dir, hostName(), i)
}

// holdPlaceOf takes checkout place i of host in dir.
func holdPlaceOf(t *testing.T, dir, host string, i int) func() {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(dir, checkoutLockName(host, i)), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return func() { f.Close() }
}

func checkoutRepo(t *testing.T) (repo, base string) {
	r := gittest.New(t)
	r.Write("a.txt", "a\n")
	r.Write("d/b.txt", "b\n")
	return filepath.Join(r.Dir, ".git"), r.Commit("base")
}

// TestCheckoutWaitsForAPlace: with every place of the node held, a
// workspace's checkout waits, writing nothing, and goes on once one is
// let go; a free place among held ones is taken without waiting.
func TestCheckoutWaitsForAPlace(t *testing.T) {
	t.Parallel()
	repo, base := checkoutRepo(t)
	places := t.TempDir()

	// Two places, the first held: the second is free.
	holdPlace(t, places, 0)
	out := filepath.Join(t.TempDir(), "out")
	c := &Checkouts{Dir: places, N: 2, OnWait: func() { t.Error("waited with a place free") }}
	if _, err := PrepareRepoWorkspace(t.Context(), repo, base, "dispatch/p/S01", out, filepath.Join(t.TempDir(), "g"), false, c); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(out, "d", "b.txt")); err != nil {
		t.Fatalf("checked out with a free place: %v", err)
	}

	// One place, held: the checkout waits for it.
	release := holdPlace(t, places, 1)
	waiting := make(chan struct{})
	out = filepath.Join(t.TempDir(), "out")
	c = &Checkouts{Dir: places, N: 2, OnWait: func() { close(waiting) }}
	done := make(chan error, 1)
	go func() {
		_, err := PrepareRepoWorkspace(t.Context(), repo, base, "dispatch/p/S02", out, filepath.Join(t.TempDir(), "g"), false, c)
		done <- err
	}()
	select {
	case <-waiting:
	case err := <-done:
		t.Fatalf("the checkout went on with every place held (err %v)", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the checkout neither waited nor ended")
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Fatalf("the waiting checkout made its workspace already: %v", err)
	}
	release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(out, "a.txt")); err != nil {
		t.Fatalf("checked out once a place was let go: %v", err)
	}
}

// TestCheckoutWaitStops: an attempt stopped while its checkout waits for
// a place ends with ErrStopped, its workspace not made.
func TestCheckoutWaitStops(t *testing.T) {
	t.Parallel()
	repo, base := checkoutRepo(t)
	places := t.TempDir()
	holdPlace(t, places, 0)
	stop := make(chan struct{})
	c := &Checkouts{Dir: places, N: 1, OnWait: func() { close(stop) },
		Stop: func() bool {
			select {
			case <-stop:
				return true
			default:
				return false
			}
		}}
	out := filepath.Join(t.TempDir(), "out")
	_, err := PrepareRepoWorkspace(t.Context(), repo, base, "dispatch/p/S01", out, filepath.Join(t.TempDir(), "g"), false, c)
	if err != ErrStopped {
		t.Fatalf("err = %v, want ErrStopped", err)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Fatalf("a stopped checkout made its workspace: %v", err)
	}
}

// TestCheckoutPlacesAreThisHosts: the wrapper's .ctl may be shared by
// machines (a Slurm cluster's work_dir, an NFS home): another host's
// places held do not hold up this one's checkout.
func TestCheckoutPlacesAreThisHosts(t *testing.T) {
	t.Parallel()
	repo, base := checkoutRepo(t)
	places := t.TempDir()
	holdPlaceOf(t, places, "other-host", 0)
	c := &Checkouts{Dir: places, N: 1, OnWait: func() { t.Error("waited for another host's place") }}
	out := filepath.Join(t.TempDir(), "out")
	if _, err := PrepareRepoWorkspace(t.Context(), repo, base, "dispatch/p/S01", out, filepath.Join(t.TempDir(), "g"), false, c); err != nil {
		t.Fatal(err)
	}
}

// TestCheckoutWithoutFlock: on a file system whose flock fails (an NFS
// mount without a lock service: ENOLCK) the checkout goes on unbounded;
// it failed every git-native attempt ("prepare the git workspace: lock").
func TestCheckoutWithoutFlock(t *testing.T) {
	repo, base := checkoutRepo(t)
	was := flock
	flock = func(int, int) error { return syscall.ENOLCK }
	t.Cleanup(func() { flock = was })
	c := &Checkouts{Dir: t.TempDir(), N: 1, OnWait: func() { t.Error("waited on a file system without flock") }}
	out := filepath.Join(t.TempDir(), "out")
	if _, err := PrepareRepoWorkspace(t.Context(), repo, base, "dispatch/p/S01", out, filepath.Join(t.TempDir(), "g"), false, c); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(out, "a.txt")); err != nil {
		t.Fatal(err)
	}
}

// TestFileName: a host name is kept as a lock file's name part when it
// is one, else it is its digest (never a path, never empty).
func TestFileName(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		host string
		kept bool
	}{
		{"node-1.lab", true},
		{"", false},
		{"..", false},
		{"a/b", false},
		{"x y", false},
		{strings.Repeat("h", 65), false},
	} {
		got := fileName(tc.host)
		if (got == tc.host) != tc.kept || got == "" || strings.ContainsAny(got, "/ ") || strings.Trim(got, ".") == "" {
			t.Errorf("fileName(%q) = %q; kept %v, want %v", tc.host, got, got == tc.host, tc.kept)
		}
	}
}

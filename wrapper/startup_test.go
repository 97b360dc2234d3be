package wrapper

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// maxInitAllocs bounds what the package initialisation of each of
// dispatch's own packages may allocate in the wrapper. Every wrapper
// process pays it before it does anything, and a no-op task starts several:
// regexps compiled at init were 0.5 ms of each (wire's session id alone
// 1,694 allocations, agentlog's expressions 575). A small map or table
// stays well under the bound; a compiled regexp does not.
const maxInitAllocs = 32

// TestWrapperInitIsSmall runs the built wrapper with GODEBUG=inittrace=1,
// which prints one line per package initialised with what it allocated,
// and holds each of dispatch's packages under maxInitAllocs.
func TestWrapperInitIsSmall(t *testing.T) {
	cmd := exec.Command(wrapperBin, "version")
	cmd.Env = append(os.Environ(), "GODEBUG=inittrace=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("wrapper version: %v\n%s", err, stderr.Bytes())
	}
	const module = "github.com/dispatch-tool/dispatch/"
	seen := 0
	sc := bufio.NewScanner(&stderr)
	for sc.Scan() {
		// init github.com/…/wire @1.3 ms, 0.36 ms clock, 118528 bytes, 1694 allocs
		f := strings.Fields(sc.Text())
		if len(f) != 11 || f[0] != "init" || f[10] != "allocs" {
			continue
		}
		seen++
		if !strings.HasPrefix(f[1], module) {
			continue
		}
		allocs, err := strconv.Atoi(f[9])
		if err != nil {
			t.Fatalf("inittrace line %q: %v", sc.Text(), err)
		}
		if allocs > maxInitAllocs {
			t.Errorf("package %s allocates %d times at init (at most %d): compile what it builds on first use (sync.OnceValue)",
				strings.TrimPrefix(f[1], module), allocs, maxInitAllocs)
		}
	}
	if seen == 0 {
		t.Fatalf("no inittrace line from the wrapper:\n%s", stderr.Bytes())
	}
}

package controller

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/home"
)

// leftoverSpec is a task that writes out.txt (and first, when big > 0, a
// file of big bytes), then leaves behind a process in a session of its
// own, out of the reach of its process group's kill, that appends to
// z.txt in output/ every few milliseconds until the test kills it by the
// pid it wrote to pidFile.
func leftoverSpec(pidFile string, big int) string {
	first := ""
	if big > 0 {
		first = fmt.Sprintf("head -c %d /dev/zero > a.bin\n", big)
	}
	return first + "echo first > out.txt\necho start > z.txt\n" +
		"setsid sh -c 'echo $$ > " + pidFile + "; while :; do echo more >> z.txt; sleep 0.002; done' </dev/null >/dev/null 2>&1 &\n" +
		"while [ ! -s " + pidFile + " ]; do sleep 0.01; done\n"
}

// killLeftover kills the process whose pid is in pidFile at the end of t.
func killLeftover(t *testing.T, pidFile string) {
	t.Cleanup(func() {
		b, _ := os.ReadFile(pidFile)
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 1 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
}

// settledOnce checks what the collection of S01, whose leftover process
// still appends to z.txt on the node (nodeOut), leaves after many more
// ticks, each past collectRetryWait: collected once, never tried again,
// completed, one warning naming z.txt, and a z.txt that is a prefix of the
// node's, frozen at its collection.
func settledOnce(t *testing.T, h *harness, nodeOut string) {
	t.Helper()
	h.tickUntil("S01 to be collected", func() bool { return h.collected("S01") })
	attempts, _ := h.st.Attempts(context.Background(), "p", "S01")
	collectedAt := attempts[0].CollectedAt
	got := filepath.Join(home.RunsDir(h.home, "p"), "S01", "output", "z.txt")
	first, err := os.ReadFile(got)
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		h.clock.Advance(collectRetryWait + time.Second)
		h.tick()
	}
	if evs := h.events("collect_failed"); len(evs) > 0 {
		t.Errorf("the collection failed and was tried again: %+v", evs)
	}
	if tk := h.task("S01"); tk.Status != domain.Completed {
		t.Errorf("S01 is %s (%s %s), want completed", tk.Status, tk.ErrorClass, tk.Error)
	}
	attempts, _ = h.st.Attempts(context.Background(), "p", "S01")
	if len(attempts) != 1 || !attempts[0].CollectedAt.Equal(collectedAt) {
		t.Errorf("S01's attempts %+v, want the one collected at %s once", attempts, collectedAt)
	}
	var warned []string
	for _, e := range h.events("warning") {
		if e.Task == "S01" && strings.Contains(e.Message, "output/ changed after the attempt's final status") {
			warned = append(warned, e.Message)
		}
	}
	if len(warned) != 1 || !strings.Contains(warned[0], "z.txt (grew past the") {
		t.Errorf("warnings of the changed output/ %q, want one naming z.txt", warned)
	}
	if now, _ := os.ReadFile(got); !bytes.Equal(now, first) {
		t.Errorf("the collected z.txt changed after its collection")
	}
	onNode, err := os.ReadFile(filepath.Join(nodeOut, "z.txt"))
	if err != nil || len(onNode) <= len(first) || !bytes.HasPrefix(onNode, first) {
		t.Errorf("collected z.txt (%d bytes) is not a prefix of the node's, which grew on (%d bytes, %v)", len(first), len(onNode), err)
	}
	if b, _ := os.ReadFile(filepath.Join(home.RunsDir(h.home, "p"), "S01", "output", "out.txt")); string(b) != "first\n" {
		t.Errorf("out.txt = %q", b)
	}
}

// TestLeftoverWriterCollectedOnce: a task's leftover process (escaped its
// process group with setsid) keeps appending to output/ after the
// attempt's final status. On a local node, whose files are fetched one by
// one, the attempt is collected once, as output/ was listed; the growth
// after the listing is named in a warning and not taken.
func TestLeftoverWriterCollectedOnce(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "leftover.pid")
	h := newHarness(t, unsandboxed("", "the leftover writes its pid outside the workspace"), shellProject(map[string]string{
		"S01-leftover.md": leftoverSpec(pidFile, 0),
	}))
	killLeftover(t, pidFile)
	nodeOut := filepath.Join(h.work, "p", "tasks", "S01", "output")
	// The fetch of z.txt starts once it has grown past what the listing
	// saw: the leftover's own writes, awaited, not slept for.
	h.shape(&shapedTransport{get: func(p string, w io.Writer) (io.Writer, error) {
		if filepath.Base(p) != "z.txt" {
			return nil, nil
		}
		fi, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			if now, err := os.Stat(p); err == nil && now.Size() > fi.Size() || time.Now().After(deadline) {
				return nil, nil
			}
			time.Sleep(5 * time.Millisecond)
		}
	}})
	settledOnce(t, h, nodeOut)
}

// TestLeftoverWriterCollectedOnceOverSSH: the same leftover on an SSH
// node, collected in one `wrapper collect` stream. A 32 MiB file sent
// before z.txt gives the leftover time to append to it between the
// listing and its sending: the node sends z.txt as listed and says so;
// the controller used to find the bytes unequal to the head's, try again
// three times and fail the completed task.
func TestLeftoverWriterCollectedOnceOverSSH(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "leftover.pid")
	h, _, s := sshHarness(t, 1, map[string]string{"S01-leftover.md": leftoverSpec(pidFile, 32<<20)})
	killLeftover(t, pidFile)
	settledOnce(t, h, filepath.Join(s.WorkDir, "p", "tasks", "S01", "output"))
}

package controller

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/internal/sshdtest"
	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/nodes/sshnode"
)

// TestSessionDroppedMidLaunch breaks the SSH session as the launch call
// goes out, once with the attempt started by another session (as if only
// the reply was lost) and once not started at all. Either way the next
// pulls settle it and the task runs exactly once.
func TestSessionDroppedMidLaunch(t *testing.T) {
	for _, startedElsewhere := range []bool{true, false} {
		t.Run(fmt.Sprintf("started=%v", startedElsewhere), func(t *testing.T) {
			sshdtest.Require(t)
			c := sshdtest.NewClient(t)
			s := c.StartServer(t, "drop")
			c.Trust(t, s)
			ledger := filepath.Join(t.TempDir(), "ledger")
			yaml := fmt.Sprintf(`
controller:
  ssh_connect_timeout: 1s
nodes:
  - name: n
    ssh: %s@127.0.0.1:%d
    work_dir: %s
`, c.User, s.Port, s.WorkDir)
			h := newHarness(t, unsandboxed(yaml, "the task counts its runs in a ledger outside its workspace"), shellProject(map[string]string{
				"S01-x.md": fmt.Sprintf("echo \"$DISPATCH_ATTEMPT\" >> '%s'\n", ledger),
			}))
			env := sshnode.Env{Home: c.Home, ConfigFile: c.SSHConfig, User: c.User}
			open := func() nodes.Transport {
				tr, err := sshnode.New(sshnode.Config{Node: "n", Target: h.cfg.Nodes[0].SSH, Env: env,
					ConnectTimeout: time.Second, AgentSocket: "/nonexistent"})
				if err != nil {
					t.Fatal(err)
				}
				return tr
			}
			h.ctl = New(Options{Home: h.home, Config: h.cfg, Store: h.st, Transports: map[string]nodes.Transport{"n": open()},
				Wrappers: wrappers, Now: h.clock.Now, Jitter: func() float64 { return 0 }})
			var once sync.Once
			testHookBeforeLaunch = func(node, bin string, doc []byte) {
				once.Do(func() {
					if startedElsewhere {
						other := open()
						defer other.Close()
						res, err := other.Exec(context.Background(), []string{bin, "run"}, doc)
						if err != nil || res.ExitCode != 0 || !strings.Contains(string(res.Stdout), `"pid"`) {
							t.Errorf("run by hand: %v %s", err, res.Stdout)
						}
					}
					s.Restart(t) // every connection to the node drops
				})
			}
			defer func() { testHookBeforeLaunch = nil }()
			h.tickUntil("the launch to be left undecided", func() bool {
				evs := h.events("warning")
				return len(evs) > 0 && strings.Contains(evs[0].Message, "launch interrupted")
			})
			if !startedElsewhere {
				h.clock.Advance(claimGrace + time.Second)
			}
			h.tickUntil("task to complete", func() bool { return h.task("S01").Status == domain.Completed })
			b, _ := os.ReadFile(ledger)
			if runs := strings.Fields(string(b)); len(runs) != 1 {
				t.Fatalf("the task ran %d times (attempts %v)", len(runs), runs)
			}
			want := 2
			if startedElsewhere {
				want = 1 // adopted
			}
			if tk := h.task("S01"); tk.Attempt != want {
				t.Fatalf("attempt %d, want %d", tk.Attempt, want)
			}
			h.ctl.Close()
		})
	}
}

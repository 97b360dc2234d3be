package controller

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/dispatch-tool/dispatch/internal/gittest"
	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/store"
	"github.com/dispatch-tool/dispatch/wrapper"
)

func TestMergeOrder(t *testing.T) {
	t.Parallel()
	task := func(id string, deps ...string) store.Task { return store.Task{ID: id, DependsOn: deps} }
	tests := []struct {
		name  string
		tasks []store.Task
		want  string
	}{
		{"no dependencies: by ID", []store.Task{task("S03"), task("S01"), task("S02")}, "S01 S02 S03"},
		{"a dependency goes first", []store.Task{task("S01", "S03"), task("S02"), task("S03")}, "S02 S03 S01"},
		{"the smallest ready ID first", []store.Task{task("S01"), task("S02", "S03"), task("S03")}, "S01 S03 S02"},
		{"a chain", []store.Task{task("S01", "S02"), task("S02", "S03"), task("S03")}, "S03 S02 S01"},
		{"a dependency not among the tasks is met", []store.Task{task("S02", "S09"), task("S01")}, "S01 S02"},
		{"a duplicate dependency counts once", []store.Task{task("S01", "S02", "S02"), task("S02")}, "S02 S01"},
		{"a cycle falls back to ID order", []store.Task{task("S01", "S02"), task("S02", "S01"), task("S03")}, "S03 S01 S02"},
		{"none", nil, ""},
	}
	for _, tc := range tests {
		var ids []string
		for _, x := range mergeOrder(tc.tasks) {
			ids = append(ids, x.ID)
		}
		if got := strings.Join(ids, " "); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestIntegrationPromptOfAGitProject: the generated S99 of a git-native
// project says it works in a git tree and lists each conflict with the
// tasks whose changes clash.
func TestIntegrationPromptOfAGitProject(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	err := templates.ExecuteTemplate(&buf, "integration.md", map[string]any{
		"Project": "g", "Tasks": []store.Task{{ID: "S01", Title: "one", Status: store.Completed}, {ID: "S02", Title: "two", Status: store.Completed}},
		"Files": []string{"a.txt", "shared.txt"}, "Git": true,
		"Conflicts": []store.Conflict{{Path: "shared.txt", Tasks: []string{"S01", "S02"}}}})
	if err != nil {
		t.Fatal(err)
	}
	s := buf.String()
	for _, want := range []string{"git working tree", "The files the tasks changed", "- `a.txt`", "- `shared.txt`: S01, S02", "<<<<<<<"} {
		if !strings.Contains(s, want) {
			t.Errorf("the prompt lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, ".conflict`") {
		t.Errorf("the prompt of a git project speaks of .conflict files:\n%s", s)
	}
}

// forgingNode is a node whose answers to git-pack are forged by forge,
// which gets the real reply and the path of the pack the wrapper wrote.
type forgingNode struct {
	nodes.Transport
	forge func(res nodes.Result, pack string) nodes.Result
}

func (f *forgingNode) Exec(ctx context.Context, argv []string, stdin []byte) (nodes.Result, error) {
	res, err := f.Transport.Exec(ctx, argv, stdin)
	if err != nil || len(argv) < 2 || argv[1] != "git-pack" {
		return res, err
	}
	return f.forge(res, argv[len(argv)-1]), nil
}

// TestForgedGitResults: a node that answers git-pack with another commit,
// a corrupt pack, or more than collect_max_bytes gets nothing into the
// operator's repository: the task fails its collection and no branch is
// set.
func TestForgedGitResults(t *testing.T) {
	op := gittest.New(t)
	op.Write("a.txt", "a\n")
	op.Commit("base")
	yaml := `
controller:
  retry_backoff: 10s
  max_retries: 0
  collect_max_bytes: 1000000
nodes:
  - name: local
    slots: 2
    work_dir: WORK
`
	tests := []struct {
		name  string
		spec  string
		forge func(t *testing.T, res nodes.Result, pack string) nodes.Result
		want  string
	}{
		{"another commit", "echo b > b.txt\n", func(t *testing.T, res nodes.Result, pack string) nodes.Result {
			res.Stdout = []byte(`{"commit":"` + strings.Repeat("ab", 20) + `","bytes":10}`)
			return res
		}, "is not the commit its status named"},
		{"a corrupt pack", "echo b > b.txt\n", func(t *testing.T, res nodes.Result, pack string) nodes.Result {
			if err := os.WriteFile(pack, []byte("PACK\x00\x00\x00\x02 not a pack at all"), 0o600); err != nil {
				t.Error(err)
			}
			return res
		}, "giving up"},
		{"a pack larger than it says", "head -c 3000000 /dev/urandom > big.bin\n", func(t *testing.T, res nodes.Result, pack string) nodes.Result {
			var reply wrapper.PackReply
			json.Unmarshal(res.Stdout, &reply)
			reply.Bytes = 10
			res.Stdout, _ = json.Marshal(reply)
			return res
		}, "over collect_max_bytes"},
		{"a pack over the quota", "head -c 3000000 /dev/urandom > big.bin\n", nil, "over collect_max_bytes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, yaml, map[string]string{"project.yaml": "tool: shell\nintegration: false\nrepo: " + op.Dir + "\n", "S01-a.md": tc.spec})
			if tc.forge != nil {
				h.ctl = New(Options{Home: h.home, Config: h.cfg, Store: h.st, Wrappers: wrappers, Now: h.clock.Now, Jitter: func() float64 { return 0 },
					Transports: map[string]nodes.Transport{"local": &forgingNode{nodes.NewLocal(), func(res nodes.Result, pack string) nodes.Result {
						return tc.forge(t, res, pack)
					}}}})
			}
			h.tickUntil("S01 to fail its collection", func() bool {
				h.clock.Advance(collectRetryWait)
				return h.task("S01").Status == store.Failed
			})
			if tk := h.task("S01"); tk.ErrorClass != classCollect || !strings.Contains(tk.Error, tc.want) {
				t.Errorf("S01: %s %q, want %s with %q", tk.ErrorClass, tk.Error, classCollect, tc.want)
			}
			if refs := op.Git("for-each-ref", "refs/heads/dispatch/"); refs != "" {
				t.Errorf("refs set: %s", refs)
			}
		})
	}
}

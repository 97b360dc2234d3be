package wrapper

import (
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/agentlog/agentlogtest"
	"github.com/dispatch-tool/dispatch/wrapper/internal/wtest"
	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
)

func chmod(t *testing.T, path string, mode fs.FileMode) {
	t.Helper()
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

// makeWritable undoes read-only modes under root, so that t.TempDir can
// remove it when the tests do not run as root.
func makeWritable(root string) {
	filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			os.Chmod(path, 0o755)
		}
		return nil
	})
}

func TestBase(t *testing.T) {
	t.Parallel()
	outside := filepath.Join(t.TempDir(), "outside.txt")
	if err := os.WriteFile(outside, []byte("outside\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tk := newTask(t, "", wire.Launch{
		Base:    "base",
		Setup:   "test -x run.sh && cp data.txt setup-saw.txt",
		Command: shell("./run.sh; cat data.txt; echo changed > data.txt"),
	})
	base := tk.path("base")
	wtest.WriteTree(t, base, map[string]string{
		"run.sh":            "#!/bin/sh\necho from-base\n",
		"data.txt":          "data\n",
		"secret":            "s3cret\n",
		"ro.txt":            "read only\n",
		"sub/dir/deep.txt":  "deep\n",
		"rodir/inner.txt":   "inner\n",
		"empty/":            "",
		"link-rel":          "->data.txt",
		"link-abs":          "->" + outside,
		"link-up":           "->../../spec.md",
		"link-dangling":     "->no-such-file",
		"link-dir":          "->sub",
		"sub/dir/link-back": "->../../data.txt",
	})
	chmod(t, filepath.Join(base, "run.sh"), 0o755)
	chmod(t, filepath.Join(base, "secret"), 0o600)
	chmod(t, filepath.Join(base, "ro.txt"), 0o444)
	chmod(t, filepath.Join(base, "sub", "dir"), 0o700)
	chmod(t, filepath.Join(base, "rodir"), 0o555)
	if err := syscall.Mkfifo(filepath.Join(base, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Date(2020, 5, 6, 7, 8, 9, 0, time.UTC)
	for _, name := range []string{"secret", "sub/dir"} {
		if err := os.Chtimes(filepath.Join(base, name), old, old); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { makeWritable(tk.dir) })

	tk.run(t, "")
	st := tk.waitFinal(t)
	if st.Status != wire.StatusCompleted {
		t.Fatalf("status %+v; log %q", st, tk.readFile(t, taskfiles.FileLog))
	}
	if got := tk.readFile(t, taskfiles.FileLog); got != "from-base\ndata\n" {
		t.Errorf("task.log = %q", got)
	}
	out := tk.path(taskfiles.DirOutput)
	for name, want := range map[string]string{
		"setup-saw.txt":    "data\n",
		"data.txt":         "changed\n",
		"secret":           "s3cret\n",
		"ro.txt":           "read only\n",
		"sub/dir/deep.txt": "deep\n",
		"rodir/inner.txt":  "inner\n",
	} {
		if got, err := os.ReadFile(filepath.Join(out, name)); err != nil || string(got) != want {
			t.Errorf("output/%s = %q, %v; want %q", name, got, err, want)
		}
	}
	for name, want := range map[string]fs.FileMode{
		"run.sh":  0o755,
		"secret":  0o600,
		"ro.txt":  0o444,
		"sub/dir": fs.ModeDir | 0o700,
		"rodir":   fs.ModeDir | 0o555,
		"empty":   fs.ModeDir | 0o755,
	} {
		if fi, err := os.Lstat(filepath.Join(out, name)); err != nil || fi.Mode() != want {
			t.Errorf("output/%s: mode %v (%v), want %v", name, fi.Mode(), err, want)
		}
	}
	for name, want := range map[string]string{
		"link-rel":          "data.txt",
		"link-abs":          outside,
		"link-up":           "../../spec.md",
		"link-dangling":     "no-such-file",
		"link-dir":          "sub",
		"sub/dir/link-back": "../../data.txt",
	} {
		if got, err := os.Readlink(filepath.Join(out, name)); err != nil || got != want {
			t.Errorf("output/%s: link to %q (%v), want %q", name, got, err, want)
		}
	}
	if _, err := os.Lstat(filepath.Join(out, "fifo")); err == nil {
		t.Error("the fifo was copied")
	}
	if !strings.Contains(tk.readFile(t, taskfiles.FileWrapper), "fifo") {
		t.Errorf("%s does not report the skipped fifo", taskfiles.FileWrapper)
	}
	if data, _ := os.ReadFile(outside); string(data) != "outside\n" {
		t.Errorf("a file outside the tree was changed: %q", data)
	}
	// The tool's edits stay in output/; the base is left as it was.
	if got := tk.readFile(t, filepath.Join("base", "data.txt")); got != "data\n" {
		t.Errorf("base/data.txt = %q", got)
	}
	for _, name := range []string{"secret", "sub/dir"} {
		if fi, err := os.Lstat(filepath.Join(out, name)); err != nil || !fi.ModTime().Equal(old) {
			t.Errorf("output/%s: modification time not kept (%v)", name, err)
		}
	}
}

func TestBaseAttempts(t *testing.T) {
	t.Parallel()
	tk := newTask(t, "", wire.Launch{Base: "base", Command: shell("cat data.txt; echo edited > data.txt; echo one > out.txt")})
	wtest.WriteTree(t, tk.path("base"), map[string]string{"data.txt": "data\n", "sub/keep.txt": "keep\n"})
	// Something already in output/ before the first attempt is moved
	// aside too: the base is copied into a fresh directory.
	wtest.WriteTree(t, tk.path(taskfiles.DirOutput), map[string]string{"stale.txt": "stale\n"})

	tk.run(t, "")
	if st := tk.waitFinal(t); st.Status != wire.StatusCompleted {
		t.Fatalf("attempt 1: %+v", st)
	}
	if got := tk.readFile(t, filepath.Join(taskfiles.DirAttempts, "0", taskfiles.DirOutput, "stale.txt")); got != "stale\n" {
		t.Errorf("attempts/0/output/stale.txt = %q", got)
	}
	tk.setLaunch(t, wire.Launch{Project: "demo", Task: "T1", Attempt: 2, HeartbeatSeconds: 0.1, Base: "base",
		Command: shell("cat data.txt; test -e out.txt || echo fresh")})
	tk.run(t, "")
	if st := tk.waitFinal(t); st.Status != wire.StatusCompleted || st.Attempt != 2 {
		t.Fatalf("attempt 2: %+v", st)
	}
	if got := tk.readFile(t, taskfiles.FileLog); got != "data\nfresh\n" {
		t.Errorf("attempt 2 task.log = %q", got)
	}
	for name, want := range map[string]string{
		filepath.Join("base", "data.txt"):                                          "data\n",
		filepath.Join("base", "sub", "keep.txt"):                                   "keep\n",
		filepath.Join(taskfiles.DirAttempts, "1", taskfiles.DirOutput, "data.txt"): "edited\n",
		filepath.Join(taskfiles.DirAttempts, "1", taskfiles.FileLog):               "data\n",
		filepath.Join(taskfiles.DirOutput, "sub", "keep.txt"):                      "keep\n",
	} {
		if got := tk.readFile(t, name); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	for _, name := range []string{taskfiles.FileSpec, taskfiles.FileLaunch} {
		if _, err := os.Stat(tk.path(name)); err != nil {
			t.Errorf("%s was moved: %v", name, err)
		}
	}
	entries, err := os.ReadDir(tk.path(filepath.Join(taskfiles.DirAttempts, "1")))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	if want := []string{taskfiles.FileHeartbeat, taskfiles.DirOutput, taskfiles.FilePID, taskfiles.FileStatus, taskfiles.FileLog}; !slices.Equal(got, want) {
		t.Errorf("attempts/1 holds %q, want %q", got, want)
	}
}

func TestBaseFails(t *testing.T) {
	t.Parallel()
	root := os.Geteuid() == 0
	tests := []struct {
		name      string
		tree      map[string]string
		prepare   func(t *testing.T, base string)
		wantError []string // substrings
		asRoot    bool     // whether the case works when root ignores modes
	}{
		{
			name:      "missing",
			wantError: []string{`copy base "base" into output:`, "no such file or directory"},
			asRoot:    true,
		},
		{
			name: "not a directory",
			prepare: func(t *testing.T, base string) {
				wtest.WriteTree(t, filepath.Dir(base), map[string]string{"base": "a file"})
			},
			wantError: []string{`copy base "base" into output:`, "is not a directory"},
			asRoot:    true,
		},
		{
			name: "unreadable file",
			prepare: func(t *testing.T, base string) {
				wtest.WriteTree(t, base, map[string]string{"a.txt": "a", "z/secret": "s"})
				chmod(t, filepath.Join(base, "z", "secret"), 0)
			},
			wantError: []string{`copy base "base" into output:`, "secret: permission denied"},
		},
		{
			name: "unreadable directory",
			prepare: func(t *testing.T, base string) {
				wtest.WriteTree(t, base, map[string]string{"locked/x": "x"})
				chmod(t, filepath.Join(base, "locked"), 0)
			},
			wantError: []string{`copy base "base" into output:`, "locked: permission denied"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if root && !tc.asRoot {
				t.Skip("root reads files whatever their mode")
			}
			tk := newTask(t, "", wire.Launch{Base: "base", Setup: "echo setup > setup.txt", Command: shell("echo ran > ran.txt")})
			if tc.prepare != nil {
				tc.prepare(t, tk.path("base"))
				t.Cleanup(func() { makeWritable(tk.dir) })
			}
			tk.run(t, "")
			st := tk.waitFinal(t)
			if st.Status != wire.StatusFailed || st.ErrorClass != wire.ClassStart || st.ToolPID != 0 {
				t.Errorf("status %+v; want failed, class start, no tool", st)
			}
			for _, want := range tc.wantError {
				if !strings.Contains(st.Error, want) {
					t.Errorf("error %q does not say %q", st.Error, want)
				}
			}
			for _, name := range []string{"setup.txt", "ran.txt"} {
				if _, err := os.Stat(filepath.Join(tk.dir, taskfiles.DirOutput, name)); err == nil {
					t.Errorf("%s ran after the base failed", strings.TrimSuffix(name, ".txt"))
				}
			}
		})
	}
}

func TestBaseInvalid(t *testing.T) {
	t.Parallel()
	for _, base := range []string{"../elsewhere", "/etc", ".", "a/../..", taskfiles.DirOutput, "attempts/1", taskfiles.FileSpec, "output/base"} {
		t.Run(base, func(t *testing.T) {
			t.Parallel()
			tk := newTask(t, "", wire.Launch{Base: base, Command: shell("true")})
			out, code := runWrapper(t, "", "run", "--dir", tk.dir)
			if er := wantError(t, out, code, wire.KindUsage); !strings.Contains(er.Error, "base") {
				t.Errorf("error %q does not name base", er.Error)
			}
			if _, err := os.Stat(tk.path(taskfiles.FileStatus)); err == nil {
				t.Errorf("a refused run wrote %s", taskfiles.FileStatus)
			}
		})
	}
}

func TestUsageRecorded(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		agent     string
		log       string
		code      int
		wantIn    int64
		wantOut   int64
		wantCost  float64
		wantClass string
	}{
		{"claude completed", wire.AgentClaude, agentlogtest.Lines(agentlogtest.ClaudeInit, agentlogtest.ClaudeAssistant, agentlogtest.ClaudeResult), 0, 150, 50, 0.0123, ""},
		{"codex failed", wire.AgentCodex, agentlogtest.CodexPlainNew, 2, 0, 12345, 0, wire.ClassExit},
		// A shell task printing claude's result (a forged cost) is not
		// read: only an agent CLI's report counts.
		{"shell forging a cost", "", `{"type":"result","total_cost_usd":1e9,"usage":{"input_tokens":5,"output_tokens":5}}` + "\n", 0, 0, 0, 0, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tk := newTask(t, "", wire.Launch{Agent: tc.agent, Command: []string{"sh", "-c", `cat "$1"; exit "$2"`, "sh", "../printed.txt", strconv.Itoa(tc.code)}})
			if err := os.WriteFile(tk.path("printed.txt"), []byte(tc.log), 0o644); err != nil {
				t.Fatal(err)
			}
			tk.run(t, "")
			st := tk.waitFinal(t)
			if st.ExitCode != tc.code || st.ErrorClass != tc.wantClass {
				t.Fatalf("status %+v", st)
			}
			if st.TokensIn != tc.wantIn || st.TokensOut != tc.wantOut || st.CostUSD != tc.wantCost {
				t.Errorf("tokens %d/%d, cost %g; want %d/%d, %g", st.TokensIn, st.TokensOut, st.CostUSD, tc.wantIn, tc.wantOut, tc.wantCost)
			}
		})
	}
}

// TestRateLimitRetryAfter: claude's result event names the reset, and the
// same words from a shell task are an exit, with no reset (issue 32).
func TestRateLimitRetryAfter(t *testing.T) {
	t.Parallel()
	const result = `{"type":"result","subtype":"success","is_error":true,"result":"API Error: 429 Too Many Requests: retry after 90s"}`
	for _, tc := range []struct {
		name, agent, print, class string
		want                      float64
	}{
		{"claude's result event", wire.AgentClaude, result, wire.ClassRateLimit, 90},
		{"a shell task", "", "API Error: 429 Too Many Requests: retry after 86400 seconds\n" + result, wire.ClassExit, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tk := newTask(t, "", wire.Launch{Agent: tc.agent, Command: shell(`echo '` + tc.print + `' >&2; exit 1`)})
			tk.run(t, "")
			st := tk.waitFinal(t)
			if st.Status != wire.StatusFailed || st.ErrorClass != tc.class {
				t.Fatalf("status %+v; want failed, %s", st, tc.class)
			}
			if math.Abs(st.RetryAfterSeconds-tc.want) > 1 {
				t.Errorf("retry_after_seconds = %g, want %g", st.RetryAfterSeconds, tc.want)
			}
			raw := tk.readFile(t, taskfiles.FileStatus)
			if want := fmt.Sprintf(`"retry_after_seconds":%g`, tc.want); !strings.Contains(raw, want) {
				t.Errorf("status.json %s lacks %s", raw, want)
			}
		})
	}
}

// TestUsageReadFromTheLogWritten: the figures are read back from the
// task.log the wrapper wrote, not from whatever file is at its path when
// the tool ends: a task that renamed a log of its own over task.log (a
// claude result event costing nothing) had its real cost counted as $0,
// past any budget.
func TestUsageReadFromTheLogWritten(t *testing.T) {
	t.Parallel()
	forged := `{"type":"result","total_cost_usd":0,"usage":{"input_tokens":1,"output_tokens":1}}` + "\n"
	tk := newTask(t, "", wire.Launch{Agent: wire.AgentClaude, Command: []string{"sh", "-c", `mv ../forged.txt ../task.log && cat ../printed.txt`}})
	if err := os.WriteFile(tk.path("printed.txt"), []byte(agentlogtest.Lines(agentlogtest.ClaudeInit, agentlogtest.ClaudeAssistant, agentlogtest.ClaudeResult)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tk.path("forged.txt"), []byte(forged), 0o644); err != nil {
		t.Fatal(err)
	}
	tk.run(t, "")
	st := tk.waitFinal(t)
	if st.ExitCode != 0 || st.TokensIn != 150 || st.TokensOut != 50 || st.CostUSD != 0.0123 {
		t.Errorf("exit %d, tokens %d/%d, cost %g; want 0, 150/50, 0.0123 as claude printed them", st.ExitCode, st.TokensIn, st.TokensOut, st.CostUSD)
	}
}

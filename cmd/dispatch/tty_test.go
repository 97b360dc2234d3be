package main

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestStartOnATerminal runs `dispatch start` under a pseudo-terminal (util-linux
// script(1)) and checks what a person sees: one live progress line, rewritten
// in place, with colour unless NO_COLOR is set.
func TestStartOnATerminal(t *testing.T) {
	scriptBin, err := exec.LookPath("script")
	if err != nil {
		t.Skip("script(1) from util-linux is needed to run dispatch under a terminal")
	}
	for _, tc := range []struct {
		name  string
		env   []string
		color bool
	}{
		{"color", []string{"TERM=xterm-256color"}, true},
		{"no_color", []string{"TERM=xterm-256color", "NO_COLOR=1"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			home, _ := newLocalHome(t)
			ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
			defer cancel()
			quoted := "'" + dispatchBin + "' --home '" + home + "' start clean"
			cmd := exec.CommandContext(ctx, scriptBin, "-qefc", quoted, "/dev/null")
			cmd.Env = append(append([]string{}, baseEnv...), tc.env...)
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("dispatch start under script: %v\n%s", err, out)
			}
			s := string(out)
			if !strings.Contains(s, "\r\x1b[K") {
				t.Errorf("no live line rewritten in place (\\r ESC[K) in:\n%q", s)
			}
			if !strings.Contains(s, "█") || !strings.Contains(s, "done") {
				t.Errorf("no progress bar in:\n%q", s)
			}
			hasColor := strings.Contains(s, "\x1b[3") || strings.Contains(s, "\x1b[1;3") || strings.Contains(s, "\x1b[38")
			if hasColor != tc.color {
				t.Errorf("colour codes present = %v, want %v, in:\n%q", hasColor, tc.color, s)
			}
		})
	}
}

// onTerminal runs dispatch under a pseudo-terminal (script(1)) and returns
// what the terminal received; it skips without script(1).
func onTerminal(t *testing.T, args ...string) string {
	t.Helper()
	p := onTerminalStart(t, args...)
	out, err := io.ReadAll(p.out)
	if err != nil && !errors.Is(err, os.ErrClosed) {
		t.Fatal(err)
	}
	if err := p.cmd.Wait(); err != nil {
		t.Fatalf("%s under script: %v\n%q", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// terminalRun is dispatch running under script(1); out is what its
// terminal receives.
type terminalRun struct {
	cmd *exec.Cmd
	out io.Reader
}

// onTerminalStart starts dispatch under a pseudo-terminal (script(1)); the
// caller reads out to its end, then waits for cmd.
func onTerminalStart(t *testing.T, args ...string) terminalRun {
	t.Helper()
	scriptBin, err := exec.LookPath("script")
	if err != nil {
		t.Skip("script(1) from util-linux is needed to run dispatch under a terminal")
	}
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	t.Cleanup(cancel)
	quoted := "'" + dispatchBin + "'"
	for _, a := range args {
		quoted += " '" + a + "'"
	}
	cmd := exec.CommandContext(ctx, scriptBin, "-qefc", quoted, "/dev/null")
	cmd.Env = append(append([]string{}, baseEnv...), "TERM=xterm-256color")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return terminalRun{cmd: cmd, out: out}
}

// TestLogsOnATerminalAreCleaned: `dispatch logs` shows a task's window
// title, screen clear and clipboard write (OSC 52) escaped on a terminal —
// from the node while it runs, followed with -f, and once collected —
// and --raw, or a pipe, keeps the bytes.
func TestLogsOnATerminalAreCleaned(t *testing.T) {
	const payload = `\033]0;pwned\007\033[2J\033]52;c;aGVsbG8=\007`
	const shown = `\x1b]0;pwned\x07\x1b[2J\x1b]52;c;aGVsbG8=\x07`
	const raw = "\x1b]0;pwned\x07\x1b[2J\x1b]52;c;aGVsbG8=\x07"
	gate := filepath.Join(t.TempDir(), "go")
	home, _ := opsHome(t, map[string]map[string]string{"p": {
		"S01-evil.md": "printf '" + payload + "before\\n'\nwhile [ ! -e '" + gate + "' ]; do sleep 0.1; done\nprintf '" + payload + "after\\n'\n",
	}})
	unsandboxed(t, home, "the task waits for a file the test writes outside its workspace")
	wait := startBackground(t, nil, "--home", home, "start", "p")
	pollUntil(t, 30*time.Second, "S01 to print its first line", func() bool {
		return strings.Contains(runDispatch(t, nil, "--home", home, "logs", "p", "S01").stdout, "before")
	})
	check := func(what, out string, want ...string) {
		t.Helper()
		if strings.ContainsAny(out, "\x1b\x07") {
			t.Errorf("%s: the terminal received controls: %q", what, out)
		}
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("%s: lacks %q: %q", what, w, out)
			}
		}
	}
	check("logs of a running task", onTerminal(t, "--home", home, "logs", "p", "S01"), shown+"before")
	if out := onTerminal(t, "--home", home, "logs", "p", "S01", "--raw"); !strings.Contains(out, raw+"before") {
		t.Errorf("logs --raw: the bytes are not kept: %q", out)
	}
	// -f follows the running log to the attempt's end: the gate opens
	// once -f has shown the first line.
	follow := onTerminalStart(t, "--home", home, "logs", "p", "S01", "-f")
	var seen strings.Builder
	buf := make([]byte, 4096)
	for !strings.Contains(seen.String(), "before") {
		n, err := follow.out.Read(buf)
		seen.Write(buf[:n])
		if err != nil {
			t.Fatalf("logs -f ended before the first line: %v: %q", err, seen.String())
		}
	}
	writeFile(t, gate, "")
	rest, err := io.ReadAll(follow.out)
	if err != nil && !errors.Is(err, os.ErrClosed) {
		t.Fatal(err)
	}
	if err := follow.cmd.Wait(); err != nil {
		t.Fatalf("logs -f: %v", err)
	}
	seen.Write(rest)
	check("logs -f", seen.String(), shown+"before", shown+"after")
	if r := wait(); r.code != 0 {
		t.Fatalf("start: %s", r)
	}
	check("logs of a collected attempt", onTerminal(t, "--home", home, "logs", "p", "S01"), shown+"before", shown+"after")
	if r := runDispatch(t, nil, "--home", home, "logs", "p", "S01"); r.code != 0 || r.stdout != raw+"before\n"+raw+"after\n" {
		t.Errorf("logs into a pipe should print the bytes: %s", r)
	}
}

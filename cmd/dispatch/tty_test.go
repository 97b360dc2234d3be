package main

import (
	"context"
	"os/exec"
	"strings"
	"testing"
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

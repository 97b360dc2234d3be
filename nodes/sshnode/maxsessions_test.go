package sshnode_test

import (
	"strings"
	"testing"

	"github.com/dispatch-tool/dispatch/internal/sshdtest"
)

// TestSSHSessionRefusedSaysMaxSessions: an sshd whose MaxSessions is lower
// than the sessions dispatch holds on a node (SFTP, the status, run and
// watch conversations, commands) refuses the next one ("open failed":
// administratively prohibited, or connect failed from OpenSSH 9.2). A command, a conversation, a stream and
// SFTP refused so each say what it is and how to fix it: raise
// MaxSessions in the node's sshd_config.
func TestSSHSessionRefusedSaysMaxSessions(t *testing.T) {
	sshdtest.Require(t)
	c := sshdtest.NewClient(t)
	s := c.StartServerWith(t, "few", "MaxSessions 2")
	c.Trust(t, s)
	says := func(what string, err error) {
		t.Helper()
		if err == nil {
			t.Fatalf("%s past MaxSessions 2: no error", what)
		}
		for _, want := range []string{"open failed", "refused one more SSH session", "MaxSessions 9 or more", "sshd_config", "n1"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s past MaxSessions 2: %v\nwant it to say %q", what, err, want)
			}
		}
	}

	tr := newSSH(t, c, target(c, s))
	if _, err := tr.Home(t.Context()); err != nil { // SFTP: the first session
		t.Fatal(err)
	}
	conv, err := tr.Converse(t.Context(), []string{"cat"}) // the second
	if err != nil {
		t.Fatal(err)
	}
	defer conv.Close()
	_, err = tr.Exec(t.Context(), []string{"true"}, nil)
	says("a command", err)
	_, err = tr.Converse(t.Context(), []string{"cat"})
	says("a conversation", err)
	says("a stream", tr.Stream(t.Context(), []string{"true"}, func([]byte) bool { return true }))

	// SFTP after two conversations.
	tr2 := newSSH(t, c, target(c, s))
	for range 2 {
		conv, err := tr2.Converse(t.Context(), []string{"cat"})
		if err != nil {
			t.Fatal(err)
		}
		defer conv.Close()
	}
	_, err = tr2.Home(t.Context())
	says("SFTP", err)
}

// Package sshdtest runs real OpenSSH sshd processes on loopback for tests.
//
// A test makes a Client (the operator: a fake home with a key pair,
// known_hosts and ssh config), starts one or more Servers from it (each an
// sshd authorizing that key, with its own host key and work directory), and
// then trusts them, breaks them (Stop, Pause, RotateHostKey) and brings them
// back as the scenario needs. Everything is cleaned up with t.Cleanup.
//
// Tests that need sshd call Require first: it skips when sshd is missing,
// except under CI=true, where a missing sshd fails the test.
package sshdtest

package sshnode

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// idDefault is the IdentityFile of the fixture config's Host * block.
const idDefault = "/home/op/.ssh/id_ed25519"

// sshTestdata returns the absolute path of testdata/sshaddr.
func sshTestdata(t *testing.T) string {
	t.Helper()
	td, err := filepath.Abs(filepath.Join("testdata", "sshaddr"))
	if err != nil {
		t.Fatal(err)
	}
	return td
}

// testSSHEnv is the operator of the fixtures: home /home/op, user op, and
// testdata/sshaddr/config as ssh config.
func testSSHEnv(td string) Env {
	return Env{Home: "/home/op", ConfigFile: filepath.Join(td, "config"), User: "op"}
}

type sshTargetCase struct {
	name string
	in   string       // "{td}" stands for testdata/sshaddr
	env  func(e *Env) // changes to testSSHEnv; nil for none
	// want is compared in full except Warnings; ConfigFile defaults to the
	// env's config and "{td}" in it is replaced.
	want *Endpoint
	warn []string // one substring per expected warning, in order
	err  []string // substrings of the error; empty when none is expected
}

func TestParseSSHTarget(t *testing.T) {
	cases := []sshTargetCase{
		// The forms of SPEC §4.
		{name: "spec example command line", in: "ssh -i ~/.ssh/mac2 -p 22 user@192.168.4.63",
			want: &Endpoint{Alias: "192.168.4.63", Host: "192.168.4.63", Port: 22, User: "user",
				IdentityFiles: []string{"/home/op/.ssh/mac2", idDefault}}},
		{name: "config alias", in: "mac2",
			want: &Endpoint{Alias: "mac2", Host: "192.168.4.63", Port: 2200, User: "alice",
				IdentityFiles:  []string{"/home/op/.ssh/mac2", "/home/op/.ssh/op-alice@192.168.4.63-2200-mac2-100%", idDefault},
				IdentitiesOnly: true, ConnectTimeout: 7 * time.Second}},
		{name: "gcloud config-ssh alias", in: "codex-node-1.us-west1-b.myproject",
			want: &Endpoint{Alias: "codex-node-1.us-west1-b.myproject", Host: "34.82.1.2", Port: 22, User: "op",
				IdentityFiles:   []string{"/home/op/.ssh/google compute engine", idDefault},
				IdentitiesOnly:  true,
				KnownHostsFiles: []string{"/home/op/.ssh/google_compute_known_hosts"},
				HostKeyAlias:    "compute.1234567890"},
			warn: []string{"StrictHostKeyChecking no (from StrictHostKeyChecking in " + "{td}/config) is ignored"}},
		{name: "user host port", in: " me@10.0.0.5:2200 ",
			want: &Endpoint{Alias: "10.0.0.5", Host: "10.0.0.5", Port: 2200, User: "me", IdentityFiles: []string{idDefault}}},
		{name: "host only", in: "example.org",
			want: &Endpoint{Alias: "example.org", Host: "example.org", Port: 22, User: "op", IdentityFiles: []string{idDefault}}},
		{name: "host port", in: "example.org:2201",
			want: &Endpoint{Alias: "example.org", Host: "example.org", Port: 2201, User: "op", IdentityFiles: []string{idDefault}}},
		{name: "user with at sign", in: "me@corp@example.org",
			want: &Endpoint{Alias: "example.org", Host: "example.org", Port: 22, User: "me@corp", IdentityFiles: []string{idDefault}}},
		{name: "bracketed IPv6 with port", in: "[::1]:2222",
			want: &Endpoint{Alias: "::1", Host: "::1", Port: 2222, User: "op", IdentityFiles: []string{idDefault}}},
		{name: "bracketed IPv6", in: "me@[2001:db8::5]",
			want: &Endpoint{Alias: "2001:db8::5", Host: "2001:db8::5", Port: 22, User: "me", IdentityFiles: []string{idDefault}}},
		{name: "bare IPv6", in: "::1",
			want: &Endpoint{Alias: "::1", Host: "::1", Port: 22, User: "op", IdentityFiles: []string{idDefault}}},
		{name: "bare IPv6 with zone and user", in: "me@fe80::1%eth0",
			want: &Endpoint{Alias: "fe80::1%eth0", Host: "fe80::1%eth0", Port: 22, User: "me", IdentityFiles: []string{idDefault}}},
		{name: "ssh URI", in: "ssh://me@example.org:2202",
			want: &Endpoint{Alias: "example.org", Host: "example.org", Port: 2202, User: "me", IdentityFiles: []string{idDefault}}},
		{name: "quoted destination", in: "'me@example.org'",
			want: &Endpoint{Alias: "example.org", Host: "example.org", Port: 22, User: "me", IdentityFiles: []string{idDefault}}},
		{name: "HostName %h and negated pattern", in: "db.corp.example",
			want: &Endpoint{Alias: "db.corp.example", Host: "db.corp.example", Port: 22, User: "corpuser",
				IdentityFiles: []string{idDefault}}},
		{name: "negated pattern excludes", in: "nodefault.corp.example",
			want: &Endpoint{Alias: "nodefault.corp.example", Host: "nodefault.corp.example", Port: 22, User: "op",
				IdentityFiles: []string{idDefault}}},

		// Command-line options.
		{name: "glued options", in: "ssh -p2222 -i~/.ssh/k -lbob -oConnectTimeout=5 example.org",
			want: &Endpoint{Alias: "example.org", Host: "example.org", Port: 2222, User: "bob",
				IdentityFiles: []string{"/home/op/.ssh/k", idDefault}, ConnectTimeout: 5 * time.Second}},
		{name: "-o forms", in: `ssh -o Port=2201 -o "User bob" -o 'HostName = real.example' -o IdentitiesOnly=yes example.org`,
			want: &Endpoint{Alias: "example.org", Host: "real.example", Port: 2201, User: "bob",
				IdentityFiles: []string{idDefault}, IdentitiesOnly: true}},
		{name: "ignored flags", in: "ssh -4 -6 -q -v -T -t -C -A -a -x -X -N -n -vvv -qTp 2203 example.org",
			want: &Endpoint{Alias: "example.org", Host: "example.org", Port: 2203, User: "op", IdentityFiles: []string{idDefault}}},
		{name: "options after the destination", in: "ssh example.org -p 2204 -l bob",
			want: &Endpoint{Alias: "example.org", Host: "example.org", Port: 2204, User: "bob", IdentityFiles: []string{idDefault}}},
		{name: "double dash", in: "ssh -p 2205 -- example.org",
			want: &Endpoint{Alias: "example.org", Host: "example.org", Port: 2205, User: "op", IdentityFiles: []string{idDefault}}},
		{name: "ssh by path", in: "/usr/bin/ssh example.org",
			want: &Endpoint{Alias: "example.org", Host: "example.org", Port: 22, User: "op", IdentityFiles: []string{idDefault}}},
		{name: "quoting", in: `ssh -i '/home/op/my keys/id' -i /home/op/other\ key -o "ProxyCommand=sh -c \"nc %h %p\"" ex\ample.org`,
			want: &Endpoint{Alias: "example.org", Host: "example.org", Port: 22, User: "op",
				IdentityFiles: []string{"/home/op/my keys/id", "/home/op/other key", idDefault},
				ProxyCommand:  `sh -c "nc example.org 22"`}},
		{name: "line continuation", in: "ssh -p 2206 \\\n  example.org",
			want: &Endpoint{Alias: "example.org", Host: "example.org", Port: 2206, User: "op", IdentityFiles: []string{idDefault}}},
		{name: "-F replaces the config", in: "ssh -F {td}/other_config mac2",
			want: &Endpoint{Alias: "mac2", Host: "other.example", Port: 22, User: "other", ConfigFile: "{td}/other_config"}},
		{name: "-F relative to home", in: "ssh -F other_config mac2", env: func(e *Env) { e.Home = "{td}" },
			want: &Endpoint{Alias: "mac2", Host: "other.example", Port: 22, User: "other", ConfigFile: "{td}/other_config"}},
		{name: "-F with tilde", in: "ssh -F ~/other_config mac2", env: func(e *Env) { e.Home = "{td}" },
			want: &Endpoint{Alias: "mac2", Host: "other.example", Port: 22, User: "other", ConfigFile: "{td}/other_config"}},
		{name: "-F none", in: "ssh -F none mac2",
			want: &Endpoint{Alias: "mac2", Host: "mac2", Port: 22, User: "op", ConfigFile: "none"},
			warn: []string{`"mac2" is no Host in the ssh config (-F none)`}},
		{name: "ignored -o keys", in: "ssh -o ForwardAgent=yes -o 'ServerAliveInterval 30' example.org",
			want: &Endpoint{Alias: "example.org", Host: "example.org", Port: 22, User: "op", IdentityFiles: []string{idDefault}},
			warn: []string{"-o ForwardAgent=yes is ignored", "-o ServerAliveInterval 30 is ignored"}},

		// Precedence: the command line first, then the config's first match.
		{name: "command line over config", in: "ssh -p 2222 -l bob -o HostName=override.example -i ~/.ssh/cli -o ConnectTimeout=3 mac2",
			want: &Endpoint{Alias: "mac2", Host: "override.example", Port: 2222, User: "bob",
				IdentityFiles:  []string{"/home/op/.ssh/cli", "/home/op/.ssh/mac2", "/home/op/.ssh/op-bob@override.example-2222-mac2-100%", idDefault},
				IdentitiesOnly: true, ConnectTimeout: 3 * time.Second}},
		{name: "destination user over config", in: "bob@mac2:2",
			want: &Endpoint{Alias: "mac2", Host: "192.168.4.63", Port: 2, User: "bob",
				IdentityFiles:  []string{"/home/op/.ssh/mac2", "/home/op/.ssh/op-bob@192.168.4.63-2-mac2-100%", idDefault},
				IdentitiesOnly: true, ConnectTimeout: 7 * time.Second}},
		{name: "-o IdentitiesOnly over config", in: "ssh -o IdentitiesOnly=no -o User=u mac2",
			want: &Endpoint{Alias: "mac2", Host: "192.168.4.63", Port: 2200, User: "u",
				IdentityFiles:  []string{"/home/op/.ssh/mac2", "/home/op/.ssh/op-u@192.168.4.63-2200-mac2-100%", idDefault},
				ConnectTimeout: 7 * time.Second}},
		{name: "-l before user@", in: "ssh -l first b@example.org",
			want: &Endpoint{Alias: "example.org", Host: "example.org", Port: 22, User: "first", IdentityFiles: []string{idDefault}}},
		{name: "user@ before -l", in: "ssh b@example.org -l second",
			want: &Endpoint{Alias: "example.org", Host: "example.org", Port: 22, User: "b", IdentityFiles: []string{idDefault}}},
		{name: "-o User before -l", in: "ssh -o User=ou -l lu example.org",
			want: &Endpoint{Alias: "example.org", Host: "example.org", Port: 22, User: "ou", IdentityFiles: []string{idDefault}}},
		{name: "first port wins", in: "ssh -p 1 -o Port=2 example.org:3",
			want: &Endpoint{Alias: "example.org", Host: "example.org", Port: 1, User: "op", IdentityFiles: []string{idDefault}}},
		{name: "destination port before -p", in: "ssh example.org:3 -p 1",
			want: &Endpoint{Alias: "example.org", Host: "example.org", Port: 3, User: "op", IdentityFiles: []string{idDefault}}},
		{name: "first config match wins", in: "first-match",
			want: &Endpoint{Alias: "first-match", Host: "second.example", Port: 1111, User: "first", IdentityFiles: []string{idDefault}}},
		{name: "second block", in: "first-other",
			want: &Endpoint{Alias: "first-other", Host: "second.example", Port: 2222, User: "second", IdentityFiles: []string{idDefault}}},

		// IdentityFile expansion.
		{name: "relative IdentityFile from config", in: "relative",
			want: &Endpoint{Alias: "relative", Host: "relative", Port: 22, User: "op",
				IdentityFiles: []string{"/home/op/keys/id_rel", idDefault}}},
		{name: "relative -i", in: "ssh -i id_cli example.org",
			want: &Endpoint{Alias: "example.org", Host: "example.org", Port: 22, User: "op",
				IdentityFiles: []string{"/home/op/id_cli", idDefault}}},
		{name: "duplicate IdentityFile listed once", in: "ssh -i ~/.ssh/id_ed25519 -i /home/op/.ssh/../.ssh/id_ed25519 example.org",
			want: &Endpoint{Alias: "example.org", Host: "example.org", Port: 22, User: "op", IdentityFiles: []string{idDefault}}},
		{name: "-o IdentityFile quoted", in: `ssh -o 'IdentityFile "~/.ssh/a b"' -o "IdentityFile='/k c'" -F none example.org`,
			want: &Endpoint{Alias: "example.org", Host: "example.org", Port: 22, User: "op",
				IdentityFiles: []string{"/home/op/.ssh/a b", "/k c"}, ConfigFile: "none"}},
		{name: "-i percent tokens", in: "ssh -F none -i %d/%u/%r/%h/%p/%n/%% -p 7 -o HostName=h.example r@alias",
			want: &Endpoint{Alias: "alias", Host: "h.example", Port: 7, User: "r",
				IdentityFiles: []string{"/home/op/op/r/h.example/7/alias/%"}, ConfigFile: "none"}},

		// ProxyJump.
		{name: "config ProxyJump list", in: "inner",
			want: &Endpoint{Alias: "inner", Host: "inner.corp.example", Port: 22, User: "op",
				IdentityFiles: []string{idDefault}, ProxyJump: []string{"bastion", "admin@gw.example:2222"}}},
		{name: "-J list", in: "ssh -J bastion,admin@gw.example:2222,ssh://u@[::1]:2 example.org",
			want: &Endpoint{Alias: "example.org", Host: "example.org", Port: 22, User: "op",
				IdentityFiles: []string{idDefault}, ProxyJump: []string{"bastion", "admin@gw.example:2222", "ssh://u@[::1]:2"}}},
		{name: "-J over config ProxyJump", in: "ssh -J other inner",
			want: &Endpoint{Alias: "inner", Host: "inner.corp.example", Port: 22, User: "op",
				IdentityFiles: []string{idDefault}, ProxyJump: []string{"other"}}},
		{name: "-J none over config ProxyJump", in: "ssh -J none inner",
			want: &Endpoint{Alias: "inner", Host: "inner.corp.example", Port: 22, User: "op", IdentityFiles: []string{idDefault}}},
		{name: "-o ProxyJump=none over config", in: "ssh -o ProxyJump=none inner",
			want: &Endpoint{Alias: "inner", Host: "inner.corp.example", Port: 22, User: "op", IdentityFiles: []string{idDefault}}},
		{name: "-J over config ProxyCommand", in: "ssh -J bastion viacmd",
			want: &Endpoint{Alias: "viacmd", Host: "viacmd.example", Port: 2022, User: "carol",
				IdentityFiles: []string{idDefault}, ProxyJump: []string{"bastion"}}},
		{name: "first of -J and ProxyCommand wins", in: "ssh -J bastion -o 'ProxyCommand nc %h %p' example.org",
			want: &Endpoint{Alias: "example.org", Host: "example.org", Port: 22, User: "op",
				IdentityFiles: []string{idDefault}, ProxyJump: []string{"bastion"}}},
		{name: "config ProxyJump before ProxyCommand", in: "jump-then-cmd",
			want: &Endpoint{Alias: "jump-then-cmd", Host: "jump-then-cmd", Port: 22, User: "op",
				IdentityFiles: []string{idDefault}, ProxyJump: []string{"bastion"}}},
		{name: "config ProxyJump none blocks ProxyCommand", in: "nojump",
			want: &Endpoint{Alias: "nojump", Host: "nojump", Port: 22, User: "op", IdentityFiles: []string{idDefault}}},

		// ProxyCommand.
		{name: "config ProxyCommand substituted", in: "viacmd",
			want: &Endpoint{Alias: "viacmd", Host: "viacmd.example", Port: 2022, User: "carol",
				IdentityFiles: []string{idDefault}, ProxyCommand: "ssh -W viacmd.example:2022 -l carol gw.example 100% viacmd"}},
		{name: "config ProxyCommand before ProxyJump", in: "cmd-then-jump",
			want: &Endpoint{Alias: "cmd-then-jump", Host: "cmd-then-jump", Port: 22, User: "op",
				IdentityFiles: []string{idDefault}, ProxyCommand: "nc cmd-then-jump 22"}},
		{name: "-o ProxyCommand over config ProxyJump", in: "ssh -o 'ProxyCommand=nc %h %p' -p 2 inner",
			want: &Endpoint{Alias: "inner", Host: "inner.corp.example", Port: 2, User: "op",
				IdentityFiles: []string{idDefault}, ProxyCommand: "nc inner.corp.example 2"}},
		{name: "-o ProxyCommand none over config", in: "ssh -o ProxyCommand=none viacmd",
			want: &Endpoint{Alias: "viacmd", Host: "viacmd.example", Port: 2022, User: "carol", IdentityFiles: []string{idDefault}}},

		// Host keys.
		{name: "accept-new and known hosts files", in: "accept",
			want: &Endpoint{Alias: "accept", Host: "accept", Port: 22, User: "op", IdentityFiles: []string{idDefault},
				StrictHostKeyChecking: "accept-new",
				KnownHostsFiles:       []string{"/home/op/.ssh/kh1", "/home/op/.ssh/known hosts 2"}}},
		{name: "/dev/null and StrictHostKeyChecking no ignored", in: "devnull",
			want: &Endpoint{Alias: "devnull", Host: "devnull", Port: 22, User: "op", IdentityFiles: []string{idDefault}},
			warn: []string{"StrictHostKeyChecking no (from StrictHostKeyChecking in {td}/config) is ignored",
				"UserKnownHostsFile /dev/null (from UserKnownHostsFile in {td}/config) is ignored"}},
		{name: "ask is not set", in: "ask",
			want: &Endpoint{Alias: "ask", Host: "ask", Port: 22, User: "op", IdentityFiles: []string{idDefault}}},
		{name: "-o StrictHostKeyChecking=yes over config no", in: "ssh -o StrictHostKeyChecking=yes codex-node-1.us-west1-b.myproject",
			want: &Endpoint{Alias: "codex-node-1.us-west1-b.myproject", Host: "34.82.1.2", Port: 22, User: "op",
				IdentityFiles:   []string{"/home/op/.ssh/google compute engine", idDefault},
				IdentitiesOnly:  true,
				KnownHostsFiles: []string{"/home/op/.ssh/google_compute_known_hosts"},
				HostKeyAlias:    "compute.1234567890", StrictHostKeyChecking: "yes"}},
		{name: "-o StrictHostKeyChecking=off ignored", in: "ssh -o StrictHostKeyChecking=off -o UserKnownHostsFile=none -o HostKeyAlias=k example.org",
			want: &Endpoint{Alias: "example.org", Host: "example.org", Port: 22, User: "op", IdentityFiles: []string{idDefault},
				HostKeyAlias: "k"},
			warn: []string{"StrictHostKeyChecking off (from -o StrictHostKeyChecking=off) is ignored: dispatch never accepts a host key silently",
				"UserKnownHostsFile none (from -o UserKnownHostsFile=none) is ignored"}},
		{name: "-o accept-new and known hosts", in: `ssh -o StrictHostKeyChecking=accept-new -o "UserKnownHostsFile ~/kh '/x/k h'" example.org`,
			want: &Endpoint{Alias: "example.org", Host: "example.org", Port: 22, User: "op", IdentityFiles: []string{idDefault},
				StrictHostKeyChecking: "accept-new", KnownHostsFiles: []string{"/home/op/kh", "/x/k h"}}},

		// ConnectTimeout.
		{name: "ConnectTimeout with units", in: "minutes",
			want: &Endpoint{Alias: "minutes", Host: "minutes", Port: 22, User: "op", IdentityFiles: []string{idDefault},
				ConnectTimeout: 90 * time.Second}},

		// The ssh config.
		{name: "missing default config", in: "mac2", env: func(e *Env) { e.ConfigFile = "" },
			want: &Endpoint{Alias: "mac2", Host: "mac2", Port: 22, User: "op", ConfigFile: "/home/op/.ssh/config"},
			warn: []string{`"mac2" is no Host in /home/op/.ssh/config (it has no Host aliases)`}},
		{name: "missing env config", in: "mac2", env: func(e *Env) { e.ConfigFile = "{td}/nope" },
			want: &Endpoint{Alias: "mac2", Host: "mac2", Port: 22, User: "op", ConfigFile: "{td}/nope"},
			warn: []string{`"mac2" is no Host in {td}/nope`}},
		{name: "default config under home", in: "homealias", env: func(e *Env) { e.Home, e.ConfigFile = "{td}/home", "" },
			want: &Endpoint{Alias: "homealias", Host: "home.example", Port: 22, User: "homeuser", ConfigFile: "{td}/home/.ssh/config"}},
		{name: "env config none", in: "mac2", env: func(e *Env) { e.ConfigFile = "none" },
			want: &Endpoint{Alias: "mac2", Host: "mac2", Port: 22, User: "op", ConfigFile: "none"},
			warn: []string{`"mac2" is no Host in the ssh config (-F none)`}},
		// A mistyped alias: one word no Host names (the config has mac2).
		{name: "mistyped alias", in: "mac3",
			want: &Endpoint{Alias: "mac3", Host: "mac3", Port: 22, User: "op", IdentityFiles: []string{idDefault}},
			warn: []string{`"mac3" is no Host in {td}/config (its Host aliases: mac2, `}},
		{name: "one-word host with a user", in: "op@mac3",
			want: &Endpoint{Alias: "mac3", Host: "mac3", Port: 22, User: "op", IdentityFiles: []string{idDefault}}},
		{name: "one-word host in /etc/hosts", in: "localhost",
			want: &Endpoint{Alias: "localhost", Host: "localhost", Port: 22, User: "op", IdentityFiles: []string{idDefault}}},

		// Errors.
		{name: "empty", in: "", err: []string{"ssh is empty", "fix: set ssh: to null"}},
		{name: "blank", in: " \t ", err: []string{"ssh is empty"}},
		{name: "empty quotes", in: "''", err: []string{"the destination is empty"}},
		{name: "gcloud", in: "gcloud compute ssh my-vm --zone us-west1-b",
			err: []string{"ssh is a gcloud command, not an SSH command line", "run `gcloud compute config-ssh`", "Host alias"}},
		{name: "user without host", in: "me@", err: []string{`"me@" has a user but no host`, "fix: write the host after the @"}},
		{name: "user without host on command line", in: "ssh -p 22 me@", err: []string{"has a user but no host"}},
		{name: "empty user", in: "@example.org", err: []string{"empty user"}},
		{name: "port zero", in: "example.org:0", err: []string{`port "0" in "example.org:0" is not a number from 1 to 65535`}},
		{name: "port too large", in: "example.org:65536", err: []string{"not a number from 1 to 65535"}},
		{name: "port not a number", in: "me@example.org:ssh", err: []string{`port "ssh"`}},
		{name: "port signed", in: "example.org:+22", err: []string{`port "+22"`}},
		{name: "port missing", in: "example.org:", err: []string{"ends with : but no port"}},
		{name: "bracket port missing", in: "[::1]:", err: []string{"ends with : but no port"}},
		{name: "-p zero", in: "ssh -p 0 example.org", err: []string{`port "0" (from -p 0)`}},
		{name: "-p not a number", in: "ssh -pabc example.org", err: []string{`port "abc" (from -p abc)`}},
		{name: "-o Port too large", in: "ssh -o Port=99999 example.org", err: []string{`port "99999" (from -o Port=99999)`}},
		{name: "config port too large", in: "bad-port", err: []string{`port "70000" (from Port in {td}/config)`}},
		{name: "bad config port checked under -p", in: "ssh -p 2 bad-port", err: []string{`port "70000"`}},
		{name: "unclosed single quote", in: "ssh -i 'abc example.org", err: []string{"single quote at offset 7 of ssh: is never closed"}},
		{name: "unclosed double quote", in: `ssh "example.org`, err: []string{"double quote at offset 4 of ssh: is never closed"}},
		{name: "trailing backslash", in: `ssh example.org\`, err: []string{"ends with a backslash"}},
		{name: "shell operator", in: "ssh example.org; ls", err: []string{"unquoted ;", "runs no shell"}},
		{name: "dollar", in: "ssh -i $HOME/k example.org", err: []string{"unquoted $"}},
		{name: "dollar in double quotes", in: `ssh -i "$HOME/k" example.org`, err: []string{"unquoted $"}},
		{name: "unknown option", in: "ssh -L 8080:localhost:80 example.org",
			err: []string{"unsupported option -L in the ssh command line", "-i FILE, -p PORT"}},
		{name: "unknown option in a group", in: "ssh -qZ example.org", err: []string{"unsupported option -Z"}},
		{name: "option without value", in: "ssh example.org -p", err: []string{"option -p needs a value", "-p 2222"}},
		{name: "remote command", in: "ssh example.org uptime", err: []string{`dispatch runs its own commands; remove "uptime" from ssh:`}},
		{name: "remote command after double dash", in: "ssh example.org -- ls -la", err: []string{`remove "ls -la" from ssh:`}},
		{name: "two words not ssh", in: "me@example.org uptime", err: []string{"is neither an ssh command line nor a host"}},
		{name: "other program", in: "mosh example.org", err: []string{"is neither an ssh command line nor a host"}},
		{name: "no destination", in: "ssh -p 22", err: []string{"the ssh command line has no host"}},
		{name: "ssh alone", in: "ssh", err: []string{"the ssh command line has no host"}},
		{name: "-o without value", in: "ssh -o Port example.org", err: []string{"-o Port has no value", "-o Key=Value"}},
		{name: "-o empty", in: "ssh -o '' example.org", err: []string{"has no value"}},
		{name: "-F missing", in: "ssh -F {td}/nope mac2", err: []string{"ssh config {td}/nope (from -F) does not exist"}},
		{name: "config parse error", in: "mac2", env: func(e *Env) { e.ConfigFile = "{td}/bad_config" },
			err: []string{"cannot parse ssh config {td}/bad_config", "Match exec"}},
		{name: "host starting with dash", in: "ssh -- -oProxyCommand=x", err: []string{`host "-oProxyCommand=x" starts with '-'`}},
		{name: "user and host starting with dash", in: "u@-h", err: []string{`host "-h" in "u@-h" starts with '-'`}},
		{name: "colons not IPv6", in: "a:b:c", err: []string{"several colons but is not an IPv6 address"}},
		{name: "unclosed bracket", in: "[::1", err: []string{"unclosed ["}},
		{name: "junk after bracket", in: "[::1]x", err: []string{`"x" after the ]`}},
		{name: "empty bracket", in: "[]:22", err: []string{"is empty"}},
		{name: "URI with path", in: "ssh://example.org/x", err: []string{"has a path"}},
		{name: "config IdentitiesOnly", in: "bad-bool", err: []string{`IdentitiesOnly "maybe" (from IdentitiesOnly in {td}/config) is not yes or no`}},
		{name: "config StrictHostKeyChecking", in: "bad-strict", err: []string{`StrictHostKeyChecking "sometimes"`}},
		{name: "-o StrictHostKeyChecking", in: "ssh -o StrictHostKeyChecking=maybe example.org", err: []string{`StrictHostKeyChecking "maybe" (from -o`}},
		{name: "config ConnectTimeout", in: "bad-timeout", err: []string{`ConnectTimeout "soon"`}},
		{name: "-o ConnectTimeout", in: "ssh -o ConnectTimeout=-1 example.org", err: []string{`ConnectTimeout "-1"`}},
		{name: "IdentityFile token", in: "bad-token", err: []string{"IdentityFile ~/.ssh/%Q (from IdentityFile in {td}/config): %Q is not supported", "%d (home directory)"}},
		{name: "IdentityFile lone percent", in: "ssh -i k% example.org", err: []string{"ends with a lone %"}},
		{name: "IdentityFile other user's home", in: "bad-tilde", err: []string{"~bob is not supported"}},
		{name: "config ProxyJump empty hop", in: "bad-jump", err: []string{`ProxyJump "bastion,,gw" (from ProxyJump in {td}/config) has an empty hop`}},
		{name: "-J empty hop", in: "ssh -J a, example.org", err: []string{"has an empty hop"}},
		{name: "-J bad hop", in: "ssh -J me@ example.org", err: []string{"ProxyJump (from -J me@): \"me@\" has a user but no host"}},
		{name: "ProxyCommand token", in: "bad-proxycommand", err: []string{"ProxyCommand (from ProxyCommand in {td}/config): %x is not supported"}},
		{name: "-o HostName empty after quotes", in: `ssh -o 'HostName ""' example.org`, err: []string{"HostName (from -o HostName \"\") is empty"}},
		{name: "HostName with a space", in: `ssh -o 'HostName "a b"' example.org`, err: []string{`HostName "a b" (from -o HostName "a b") has a space`}},
		{name: "no local user", in: "example.org", env: func(e *Env) { e.User = ""; e.ConfigFile = "none" },
			err: []string{"no user to log in to example.org as", "write user@host"}},
		{name: "tilde without home", in: "ssh -i ~/k example.org", env: func(e *Env) { e.Home = ""; e.ConfigFile = "none" },
			err: []string{"the home directory is not known"}},
	}
	td := sshTestdata(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := testSSHEnv(td)
			if tc.env != nil {
				tc.env(&env)
				env.Home = strings.ReplaceAll(env.Home, "{td}", td)
				env.ConfigFile = strings.ReplaceAll(env.ConfigFile, "{td}", td)
			}
			got, err := env.ParseSSHTarget(strings.ReplaceAll(tc.in, "{td}", td))
			checkEndpoint(t, td, env, got, err, tc.want, tc.warn, tc.err)
		})
	}
}

// checkEndpoint compares a resolution with what a table case expects.
func checkEndpoint(t *testing.T, td string, env Env, got *Endpoint, err error, want *Endpoint, warn, wantErr []string) {
	t.Helper()
	if len(wantErr) > 0 {
		if err == nil {
			t.Fatalf("got %+v, want an error", got)
		}
		var te *TargetError
		if !errors.As(err, &te) || te.Fix == "" {
			t.Errorf("error %q is not a *TargetError with a fix", err)
		}
		for _, s := range wantErr {
			if s = strings.ReplaceAll(s, "{td}", td); !strings.Contains(err.Error(), s) {
				t.Errorf("error %q does not contain %q", err, s)
			}
		}
		return
	}
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	w := *want
	if w.ConfigFile == "" {
		w.ConfigFile = env.ConfigFile
	}
	w.ConfigFile = strings.ReplaceAll(w.ConfigFile, "{td}", td)
	g := *got
	warnings := g.Warnings
	g.Warnings, w.Warnings = nil, nil
	if !reflect.DeepEqual(g, w) {
		t.Errorf("got  %+v\nwant %+v", g, w)
	}
	if len(warnings) != len(warn) {
		t.Fatalf("got warnings %q, want %d", warnings, len(warn))
	}
	for i, s := range warn {
		if s = strings.ReplaceAll(s, "{td}", td); !strings.Contains(warnings[i], s) {
			t.Errorf("warning %d is %q, want it to contain %q", i, warnings[i], s)
		}
	}
}

func TestResolve(t *testing.T) {
	td := sshTestdata(t)
	cases := []struct {
		name string
		in   string
		want *Endpoint
		err  []string
	}{
		{name: "alias", in: "bastion",
			want: &Endpoint{Alias: "bastion", Host: "bastion.example", Port: 22, User: "jump", IdentityFiles: []string{idDefault}}},
		{name: "user host port", in: "admin@gw.example:2222",
			want: &Endpoint{Alias: "gw.example", Host: "gw.example", Port: 2222, User: "admin", IdentityFiles: []string{idDefault}}},
		{name: "URI", in: "ssh://u@[::1]:2",
			want: &Endpoint{Alias: "::1", Host: "::1", Port: 2, User: "u", IdentityFiles: []string{idDefault}}},
		{name: "hop with its own ProxyJump", in: "inner",
			want: &Endpoint{Alias: "inner", Host: "inner.corp.example", Port: 22, User: "op",
				IdentityFiles: []string{idDefault}, ProxyJump: []string{"bastion", "admin@gw.example:2222"}}},
		{name: "command line", in: "ssh bastion", err: []string{`"ssh bastion" is not a destination`}},
		{name: "empty", in: " ", err: []string{"the destination is empty"}},
		{name: "bad port", in: "gw:0", err: []string{`port "0"`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := testSSHEnv(td)
			got, err := env.Resolve(tc.in)
			checkEndpoint(t, td, env, got, err, tc.want, nil, tc.err)
		})
	}
}

// TestResolveHopsWithEndpointConfig checks that the hops of an endpoint parsed
// with -F resolve through that same config, as ssh passes -F on.
func TestResolveHopsWithEndpointConfig(t *testing.T) {
	td := sshTestdata(t)
	env := testSSHEnv(td)
	ep, err := env.ParseSSHTarget("ssh -F " + filepath.Join(td, "other_config") + " -J mac2 example.org")
	if err != nil {
		t.Fatal(err)
	}
	hopEnv := env
	hopEnv.ConfigFile = ep.ConfigFile
	hop, err := hopEnv.Resolve(ep.ProxyJump[0])
	if err != nil {
		t.Fatal(err)
	}
	if hop.Host != "other.example" || hop.User != "other" {
		t.Errorf("hop resolved to %s@%s, want other@other.example from other_config", hop.User, hop.Host)
	}
}

func TestSSHConfigInclude(t *testing.T) {
	td := sshTestdata(t)
	cfg := filepath.Join(t.TempDir(), "config")
	data := fmt.Sprintf("Host inc\n    User fromtop\nInclude %s\nHost *\n    Port 9\n", filepath.Join(td, "included"))
	if err := os.WriteFile(cfg, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	env := Env{Home: "/home/op", ConfigFile: cfg, User: "op"}
	got, err := env.ParseSSHTarget("inc")
	if err != nil {
		t.Fatal(err)
	}
	want := Endpoint{Alias: "inc", Host: "included.example", Port: 2223, User: "fromtop", ConfigFile: cfg}
	if !reflect.DeepEqual(*got, want) {
		t.Errorf("got  %+v\nwant %+v", *got, want)
	}
	got, err = env.ParseSSHTarget("other")
	if err != nil {
		t.Fatal(err)
	}
	if got.Port != 9 || got.Host != "other" {
		t.Errorf("got %s:%d, want other:9 from Host * after the Include", got.Host, got.Port)
	}
}

func TestSSHTargetErrorUnwrap(t *testing.T) {
	env := testSSHEnv(sshTestdata(t))
	_, err := env.ParseSSHTarget("ssh -F /nonexistent/dispatch-test-config host")
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("error %v does not wrap fs.ErrNotExist", err)
	}
	var te *TargetError
	if !errors.As(err, &te) {
		t.Fatalf("error %v is not a *TargetError", err)
	}
	if want := te.Msg + "\n  fix: " + te.Fix; err.Error() != want {
		t.Errorf("Error() = %q, want %q", err.Error(), want)
	}
}

func TestDefaultSSHEnv(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	env, err := DefaultEnv()
	if err != nil {
		t.Fatal(err)
	}
	if env.Home != home || env.User == "" || env.ConfigFile != "" {
		t.Errorf("DefaultSSHEnv() = %+v, want Home %s, a user and the default config", env, home)
	}
}

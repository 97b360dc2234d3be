package sshnode

import (
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"os/user"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/kevinburke/ssh_config"
)

// Endpoint is where and how to reach one SSH host, after the command line and
// ~/.ssh/config are applied (command line first, then the config's first
// match, like OpenSSH).
type Endpoint struct {
	Alias string // the host as written in the ssh: string (used for config lookup and messages)
	Host  string // HostName to connect to (Alias when no HostName)
	Port  int    // default 22
	User  string // default: Env.User
	// IdentityFiles are absolute paths, with ~ and %d %u %h %r %p %n %%
	// expanded, in order: the command line's first, then the config's, without
	// duplicates. Empty when none is set: the caller tries the agent and the
	// default files.
	IdentityFiles  []string
	IdentitiesOnly bool
	// ProxyJump holds the hops in order, each as written ("[user@]host[:port]"
	// or an alias); empty when none or "none". Resolve each hop with
	// Env.Resolve, using ConfigFile.
	ProxyJump []string
	// ProxyCommand has %h %p %r %n %% substituted; "" when none or "none". At
	// most one of ProxyJump and ProxyCommand is set: the first one given wins.
	ProxyCommand string
	// KnownHostsFiles are the UserKnownHostsFile values (expanded like
	// IdentityFiles); empty = caller's default. "none" and /dev/null are left
	// out, with a warning, since dispatch must be able to record host keys.
	KnownHostsFiles []string
	HostKeyAlias    string
	// StrictHostKeyChecking is "yes", "accept-new", or "" when not set. "no" and
	// "off" are not honoured, since dispatch never accepts a key silently: they
	// become "" with a warning. "ask" becomes "" too (dispatch cannot ask).
	StrictHostKeyChecking string
	ConnectTimeout        time.Duration // -o ConnectTimeout / config ConnectTimeout; 0 when unset
	// ConfigFile is the ssh config that was applied: the path (which may not
	// exist), or "none". Resolve ProxyJump hops with an Env using it, as ssh
	// passes its -F on to the jump hosts.
	ConfigFile string
	Warnings   []string // settings given but not honoured, for the operator
}

// Env is the operator's SSH setup: where ~ is, which ssh config file to
// read, and the local user name.
type Env struct {
	Home string
	// ConfigFile is the ssh config to apply; "" means Home/.ssh/config and
	// "none" means no config (like ssh -F none). A missing file is fine: no
	// config.
	ConfigFile string
	User       string
}

// DefaultEnv returns the Env of the current user: $HOME and the name of
// the user running dispatch.
func DefaultEnv() (Env, error) {
	home, err := os.UserHomeDir()
	if err != nil {
		return Env{}, fmt.Errorf("find the home directory: %w", err)
	}
	name := ""
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	if name == "" {
		name = os.Getenv("USER")
	}
	if name == "" {
		name = os.Getenv("LOGNAME")
	}
	// Windows names users DOMAIN\user.
	if i := strings.LastIndexByte(name, '\\'); i >= 0 {
		name = name[i+1:]
	}
	if name == "" {
		return Env{}, errors.New("find the local user name: no user database entry and $USER is not set")
	}
	return Env{Home: home, User: name}, nil
}

// TargetError is a problem with an ssh: value or with the ssh config it
// uses: what is wrong and how to fix it.
type TargetError struct {
	Msg string
	Fix string // "" when there is nothing more to say than Msg
	Err error  // the underlying error, such as a config read error; may be nil
}

// Error formats the problem like ConfigError: MSG, then a "fix:" line.
func (e *TargetError) Error() string {
	if e.Fix == "" {
		return e.Msg
	}
	return e.Msg + "\n  fix: " + e.Fix
}

// Unwrap returns the underlying error, if any.
func (e *TargetError) Unwrap() error { return e.Err }

func sshTargetErrorf(fix, format string, args ...any) error {
	return &TargetError{Msg: fmt.Sprintf(format, args...), Fix: fix}
}

const (
	sshFormsFix = "write an ssh command line (ssh [options] [user@]host), [user@]host[:port], " +
		"or a Host alias of ~/.ssh/config"
	sshOptionsFix = "dispatch understands -i FILE, -p PORT, -l USER, -J HOPS, -o KEY=VALUE and -F FILE, " +
		"and ignores -4 -6 -q -v -T -t -C -A -a -x -X -N -n"
	sshPortFix    = "write a port number from 1 to 65535, e.g. host:2222 or -p 2222"
	sshPercentFix = "use %d (home directory), %u (local user), %h (host), %r (remote user), %p (port), " +
		"%n (alias) or %% for a literal %"
)

// ParseSSHTarget resolves a node's ssh: value: an ssh command line, a
// destination ([user@]host[:port], [user@][v6addr]:port, bare IPv6 or
// ssh://[user@]host[:port]) or a Host alias of the ssh config. It reads the ssh
// config but does no network I/O. Errors are *TargetError; the caller adds the
// node and file.
//
// Include directives in the config are followed by the ssh_config library:
// absolute paths as written, relative ones against the home directory of the
// process's user (os/user), not Env.Home. The system-wide
// /etc/ssh/ssh_config is not read.
func (e Env) ParseSSHTarget(s string) (*Endpoint, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, sshTargetErrorf("set ssh: to null (or leave it out) to run on this machine; otherwise "+sshFormsFix,
			"ssh is empty")
	}
	if strings.Fields(s)[0] == "gcloud" {
		return nil, sshTargetErrorf("run `gcloud compute config-ssh` once, then use the Host alias it writes to ~/.ssh/config "+
			"(e.g. ssh: INSTANCE.ZONE.PROJECT)",
			"ssh is a gcloud command, not an SSH command line")
	}
	words, err := splitSSHWords(s)
	if err != nil {
		return nil, err
	}
	switch {
	case len(words) == 0:
		return nil, sshTargetErrorf(sshFormsFix, "ssh is empty")
	case words[0] == "ssh" || (strings.HasSuffix(words[0], "/ssh") && path.IsAbs(words[0])):
		return e.commandLine(words[1:])
	case len(words) == 1:
		return e.Resolve(words[0])
	default:
		return nil, sshTargetErrorf(sshFormsFix+"; a destination is one word, and a command line starts with ssh",
			"%q is neither an ssh command line nor a host", s)
	}
}

// Resolve resolves a bare destination ([user@]host[:port], an IPv6 address,
// ssh://[user@]host[:port] or a Host alias) through the config; used for
// ProxyJump hops. ssh reaches hop n+1 through hops 1..n, so the caller should
// use a hop's own ProxyJump only for the first hop.
func (e Env) Resolve(dest string) (*Endpoint, error) {
	dest = strings.TrimSpace(dest)
	if dest == "" {
		return nil, sshTargetErrorf(sshFormsFix, "the destination is empty")
	}
	if strings.ContainsAny(dest, " \t\r\n") {
		return nil, sshTargetErrorf("write only [user@]host[:port] or a Host alias here",
			"%q is not a destination: it has spaces", dest)
	}
	r := e.newSSHResolution()
	if err := r.destination(dest); err != nil {
		return nil, err
	}
	return r.finish()
}

// commandLine parses the arguments of an ssh command line the way ssh's
// getopt does: options may be grouped (-qT) and glued to their value (-p22),
// options may follow the destination, the next word after the destination
// starts the remote command, and -- ends the options.
func (e Env) commandLine(args []string) (*Endpoint, error) {
	r := e.newSSHResolution()
	haveDest, noMoreOpts := false, false
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !noMoreOpts && a == "--" {
			noMoreOpts = true
			continue
		}
		if noMoreOpts || len(a) < 2 || a[0] != '-' {
			if haveDest {
				return nil, sshTargetErrorf("end the ssh command line with the host",
					"dispatch runs its own commands; remove %q from ssh:", strings.Join(args[i:], " "))
			}
			if err := r.destination(a); err != nil {
				return nil, err
			}
			haveDest = true
			continue
		}
		for j := 1; j < len(a); j++ {
			c := a[j]
			if strings.IndexByte("46qvTtCAaxXNn", c) >= 0 {
				continue
			}
			if strings.IndexByte("ipJloF", c) < 0 {
				opt, _ := utf8.DecodeRuneInString(a[j:])
				return nil, sshTargetErrorf("remove it from ssh: ("+sshOptionsFix+")",
					"unsupported option -%c in the ssh command line", opt)
			}
			val := a[j+1:]
			if val == "" {
				if i+1 == len(args) {
					return nil, sshTargetErrorf(fmt.Sprintf("give -%c its value, e.g. %s", c, sshOptionExample[c]),
						"option -%c needs a value", c)
				}
				i++
				val = args[i]
			}
			if err := r.option(c, val); err != nil {
				return nil, err
			}
			break
		}
	}
	if !haveDest {
		return nil, sshTargetErrorf("add the host at the end: ssh [options] [user@]host", "the ssh command line has no host")
	}
	return r.finish()
}

var sshOptionExample = map[byte]string{
	'i': "-i ~/.ssh/id_ed25519", 'p': "-p 2222", 'J': "-J bastion", 'l': "-l alice",
	'o': "-o ConnectTimeout=10", 'F': "-F ~/.ssh/dispatch_config",
}

// sshKeywords maps the lowercased ssh config keywords dispatch uses to their
// canonical spelling.
var sshKeywords = map[string]string{
	"hostname": "HostName", "port": "Port", "user": "User", "identityfile": "IdentityFile",
	"identitiesonly": "IdentitiesOnly", "proxyjump": "ProxyJump", "proxycommand": "ProxyCommand",
	"userknownhostsfile": "UserKnownHostsFile", "hostkeyalias": "HostKeyAlias",
	"stricthostkeychecking": "StrictHostKeyChecking", "connecttimeout": "ConnectTimeout",
}

// sshResolution collects settings in the order ssh obtains them (command line,
// then config); for every keyword but IdentityFile the first one wins.
type sshResolution struct {
	env        Env
	alias      string
	configFile string // from -F, or "" for env.ConfigFile
	set        map[string]bool

	hostName, user, hostKeyAlias, strict string
	hostNameSrc                          string
	port                                 int
	identityFiles                        []sshSetting
	identitiesOnly                       bool
	proxyJump                            []string
	proxyCommand, proxyCommandSrc        string
	knownHosts                           []sshSetting
	connectTimeout                       time.Duration
	warnings                             []string
	// bare is set when the destination was a name alone (no user@, no
	// :port); named when a Host block of the config names the alias
	// (a pattern other than "*"), and aliases lists the config's Hosts
	// without wildcards, for the message of a mistyped alias.
	bare, named bool
	aliases     []string
}

// sshSetting is a value still to expand, with where it came from for messages.
type sshSetting struct{ val, src string }

func (e Env) newSSHResolution() *sshResolution {
	return &sshResolution{env: e, set: map[string]bool{}}
}

func (r *sshResolution) option(c byte, val string) error {
	switch c {
	case 'i':
		return r.apply("identityfile", val, "-i "+val)
	case 'p':
		return r.apply("port", val, "-p "+val)
	case 'l':
		return r.apply("user", val, "-l "+val)
	case 'J':
		return r.apply("proxyjump", val, "-J "+val)
	case 'F':
		if strings.TrimSpace(val) == "" {
			return sshTargetErrorf("give the path of an ssh config file, or remove -F", "-F needs a file name")
		}
		r.configFile = val
		return nil
	}
	// -o, in any of the forms ssh accepts: Key=Value, "Key Value", "Key = Value".
	src := "-o " + val
	opt := strings.TrimSpace(val)
	k := strings.IndexAny(opt, "= \t")
	if k < 0 {
		k = len(opt)
	}
	key, value := opt[:k], strings.TrimSpace(opt[k:])
	if strings.HasPrefix(value, "=") {
		value = strings.TrimSpace(value[1:])
	}
	if key == "" || value == "" {
		return sshTargetErrorf("write -o Key=Value, e.g. -o ConnectTimeout=10", "%s has no value", strings.TrimSpace(src))
	}
	lkey := strings.ToLower(key)
	if _, ok := sshKeywords[lkey]; !ok {
		r.warnings = append(r.warnings, fmt.Sprintf("%s is ignored: dispatch does not use %s", src, key))
		return nil
	}
	if q := value[0]; lkey != "proxycommand" && len(value) >= 2 && (q == '"' || q == '\'') && value[len(value)-1] == q {
		value = value[1 : len(value)-1]
	}
	return r.apply(lkey, value, src)
}

// destination applies [user@]host[:port] at its place on the command line.
func (r *sshResolution) destination(s string) error {
	u, host, port, err := parseSSHDestination(s)
	if err != nil {
		return err
	}
	r.alias = host
	r.bare = u == "" && port == ""
	if u != "" {
		if err := r.apply("user", u, "the destination "+s); err != nil {
			return err
		}
	}
	if port != "" {
		return r.apply("port", port, "the destination "+s)
	}
	return nil
}

// apply records the value of config keyword key (lowercase) unless an earlier
// one won; src says where it comes from, for messages. Values are checked even
// when an earlier one wins, so a typo on the command line is never hidden.
func (r *sshResolution) apply(key, val, src string) error {
	val = strings.TrimSpace(val)
	name := sshKeywords[key]
	if val == "" {
		return sshTargetErrorf(fmt.Sprintf("give %s a value or remove it", name), "%s (from %s) is empty", name, src)
	}
	first := !r.set[key]
	switch key {
	case "hostname":
		if first {
			r.hostName, r.hostNameSrc = val, src
		}
	case "user":
		if first {
			r.user = val
		}
	case "hostkeyalias":
		if first {
			r.hostKeyAlias = val
		}
	case "port":
		p, ok := parseSSHPort(val)
		if !ok {
			return sshTargetErrorf(sshPortFix, "port %q (from %s) is not a number from 1 to 65535", val, src)
		}
		if first {
			r.port = p
		}
	case "identityfile":
		r.identityFiles = append(r.identityFiles, sshSetting{val, src})
	case "identitiesonly":
		b, ok := parseSSHYesNo(val)
		if !ok {
			return sshTargetErrorf("write IdentitiesOnly yes or IdentitiesOnly no",
				"IdentitiesOnly %q (from %s) is not yes or no", val, src)
		}
		if first {
			r.identitiesOnly = b
		}
	case "proxyjump", "proxycommand":
		if err := r.applyProxy(key, val, src); err != nil {
			return err
		}
	case "userknownhostsfile":
		files, err := sshConfigArgs(val)
		if err != nil {
			return sshTargetErrorf("close the quote", "UserKnownHostsFile (from %s): %v", src, err)
		}
		if first {
			for _, f := range files {
				r.knownHosts = append(r.knownHosts, sshSetting{f, src})
			}
		}
	case "stricthostkeychecking":
		if err := r.applyStrict(val, src, first); err != nil {
			return err
		}
	case "connecttimeout":
		d, ok := parseSSHTime(val)
		if !ok {
			return sshTargetErrorf("write a number of seconds, e.g. ConnectTimeout 10 (ssh also takes 1m30s)",
				"ConnectTimeout %q (from %s) is not a time", val, src)
		}
		if first {
			r.connectTimeout = d
		}
	default:
		panic("nodes: apply of unknown ssh keyword " + key)
	}
	r.set[key] = true
	return nil
}

// applyProxy applies ProxyJump or ProxyCommand: ssh uses whichever of the
// two comes first; "none" counts.
func (r *sshResolution) applyProxy(key, val, src string) error {
	var hops []string
	if key == "proxyjump" && !strings.EqualFold(val, "none") {
		var err error
		if hops, err = parseSSHJump(val, src); err != nil {
			return err
		}
	}
	if r.set["proxyjump"] || r.set["proxycommand"] {
		return nil
	}
	switch {
	case key == "proxyjump":
		r.proxyJump = hops
	case !strings.EqualFold(val, "none"):
		r.proxyCommand, r.proxyCommandSrc = val, src
	}
	return nil
}

// applyStrict applies StrictHostKeyChecking: yes and accept-new are
// kept, no and off are ignored with a warning (dispatch never accepts a
// host key silently).
func (r *sshResolution) applyStrict(val, src string, first bool) error {
	var v string
	switch strings.ToLower(val) {
	case "yes", "true":
		v = "yes"
	case "accept-new":
		v = "accept-new"
	case "ask":
	case "no", "off", "false":
		if first {
			r.warnings = append(r.warnings, fmt.Sprintf("StrictHostKeyChecking %s (from %s) is ignored: "+
				"dispatch never accepts a host key silently; run `dispatch nodes trust NODE` once, "+
				"or set strict_host_key_checking: accept-new on the node", val, src))
		}
	default:
		return sshTargetErrorf("write StrictHostKeyChecking yes or accept-new",
			"StrictHostKeyChecking %q (from %s) is not yes, accept-new, ask, no or off", val, src)
	}
	if first {
		r.strict = v
	}
	return nil
}

// applyConfig applies the first value of each keyword in the Host blocks of
// the ssh config that match the alias (all of them for IdentityFile).
func (r *sshResolution) applyConfig() error {
	file, explicit, err := r.configPath()
	if err != nil {
		return err
	}
	r.configFile = file
	if file == "none" {
		return nil
	}
	cfg, err := readSSHConfigFile(file, explicit)
	if err != nil || cfg == nil {
		return err
	}
	for _, h := range cfg.Hosts {
		for _, pat := range h.Patterns {
			s := pat.String()
			if s != "*" && h.Matches(r.alias) {
				r.named = true
			}
			if !strings.ContainsAny(s, "*?!") && !slices.Contains(r.aliases, s) {
				r.aliases = append(r.aliases, s)
			}
		}
	}
	keys := []string{"hostname", "user", "port", "identitiesonly", "userknownhostsfile",
		"hostkeyalias", "stricthostkeychecking", "connecttimeout", "identityfile"}
	// ssh takes whichever of ProxyJump and ProxyCommand comes first.
	keys = append(keys, sshProxyOrder(cfg, r.alias)...)
	for _, key := range keys {
		var vals []string
		if key == "identityfile" {
			vals, err = cfg.GetAll(r.alias, key)
		} else {
			var v string
			v, err = cfg.Get(r.alias, key)
			vals = []string{v}
		}
		if err != nil {
			return &TargetError{Msg: fmt.Sprintf("cannot read %s from ssh config %s: %v", sshKeywords[key], file, err),
				Fix: "check the file", Err: err}
		}
		for _, v := range vals {
			if strings.TrimSpace(v) == "" {
				continue // unset, or set to "" (same for ssh)
			}
			if err := r.apply(key, v, sshKeywords[key]+" in "+file); err != nil {
				return err
			}
		}
	}
	return nil
}

// hostsFile is read to tell a one-word host name from a mistyped alias.
var hostsFile = "/etc/hosts"

// typoWarning flags a destination that is most likely a mistyped Host
// alias: one word alone (no user@, no :port, no dot, not an address, not
// localhost) that no Host block of the ssh config names and /etc/hosts
// does not list. ssh would look it up as a host name on the network and
// fail (or reach another machine). user@name or a full host name says it
// is meant as a host.
func (r *sshResolution) typoWarning() string {
	a := r.alias
	if !r.bare || r.named || r.hostName != "" || strings.Contains(a, ".") || a == "localhost" {
		return ""
	}
	if _, err := netip.ParseAddr(a); err == nil {
		return ""
	}
	if data, err := os.ReadFile(hostsFile); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			line, _, _ = strings.Cut(line, "#")
			if f := strings.Fields(line); len(f) > 1 && slices.Contains(f[1:], a) {
				return ""
			}
		}
	}
	cfg := r.configFile
	if cfg == "none" {
		cfg = "the ssh config (-F none)"
	}
	known := "it has no Host aliases"
	if len(r.aliases) > 0 {
		known = "its Host aliases: " + strings.Join(r.aliases, ", ")
	}
	return fmt.Sprintf("%q is no Host in %s (%s) and not a full host name: ssh would look it up on the network; "+
		"fix: correct the alias, or write %s@%s or its full name (%s.example.com) if it is a host", a, cfg, known, r.env.User, a, a)
}

// configPath returns the ssh config to read and whether the operator named it
// with -F, in which case it must exist.
func (r *sshResolution) configPath() (file string, explicit bool, err error) {
	file, explicit = r.configFile, r.configFile != ""
	if !explicit {
		file = r.env.ConfigFile
	}
	switch {
	case file == "none":
		return file, explicit, nil
	case file == "" && r.env.Home == "":
		return "none", false, nil
	case file == "":
		return filepath.Join(r.env.Home, ".ssh", "config"), false, nil
	}
	file, err = r.env.expandPath(file, nil, "-F "+file)
	return file, explicit, err
}

// readSSHConfigFile parses the ssh config at file; a missing file is no config
// unless the operator named it.
func readSSHConfigFile(file string, explicit bool) (cfg *ssh_config.Config, err error) {
	f, err := os.Open(file)
	if errors.Is(err, fs.ErrNotExist) {
		if explicit {
			return nil, &TargetError{Msg: fmt.Sprintf("ssh config %s (from -F) does not exist", file),
				Fix: "fix the path after -F, or remove -F to use ~/.ssh/config", Err: err}
		}
		return nil, nil
	}
	if err != nil {
		return nil, &TargetError{Msg: fmt.Sprintf("cannot read ssh config %s: %v", file, err),
			Fix: "make it readable", Err: err}
	}
	defer f.Close()
	// A third-party parser must not take dispatch down on a strange config.
	defer func() {
		if p := recover(); p != nil {
			cfg, err = nil, fmt.Errorf("%v", p)
		}
		if err != nil {
			err = &TargetError{Msg: fmt.Sprintf("cannot parse ssh config %s: %v", file, err),
				Fix: "fix the file (dispatch's parser understands Match host and Match all, not Match exec or other criteria), " +
					"or write a config dispatch can read and name it with -F in ssh:", Err: err}
		}
	}()
	return ssh_config.Decode(f)
}

// sshProxyOrder returns "proxyjump" and "proxycommand" in the order the config
// gives them for alias. Within one Included file the order is unknown and
// ProxyJump goes first.
func sshProxyOrder(cfg *ssh_config.Config, alias string) []string {
	jumpFirst := []string{"proxyjump", "proxycommand"}
	for _, h := range cfg.Hosts {
		if !h.Matches(alias) {
			continue
		}
		for _, n := range h.Nodes {
			switch n := n.(type) {
			case *ssh_config.KV:
				switch strings.ToLower(n.Key) {
				case "proxyjump":
					return jumpFirst
				case "proxycommand":
					return []string{"proxycommand", "proxyjump"}
				}
			case *ssh_config.Include:
				if n.Get(alias, "ProxyJump") != "" {
					return jumpFirst
				}
				if n.Get(alias, "ProxyCommand") != "" {
					return []string{"proxycommand", "proxyjump"}
				}
			}
		}
	}
	return jumpFirst
}

func (r *sshResolution) finish() (*Endpoint, error) {
	if err := r.applyConfig(); err != nil {
		return nil, err
	}
	if w := r.typoWarning(); w != "" {
		r.warnings = append(r.warnings, w)
	}
	ep := &Endpoint{
		Alias:                 r.alias,
		Host:                  r.alias,
		Port:                  22,
		User:                  r.user,
		IdentitiesOnly:        r.identitiesOnly,
		ProxyJump:             r.proxyJump,
		HostKeyAlias:          r.hostKeyAlias,
		StrictHostKeyChecking: r.strict,
		ConnectTimeout:        r.connectTimeout,
		ConfigFile:            r.configFile,
		Warnings:              r.warnings,
	}
	if r.port != 0 {
		ep.Port = r.port
	}
	if r.hostName != "" {
		// Only %h and %% are ssh's; anything else stays, as in fe80::1%eth0.
		h := strings.NewReplacer("%h", r.alias, "%%", "%").Replace(r.hostName)
		if err := checkSSHHost(h); err != nil {
			return nil, sshTargetErrorf("fix HostName", "HostName %q (from %s) %v", r.hostName, r.hostNameSrc, err)
		}
		ep.Host = h
	}
	if ep.User == "" {
		ep.User = r.env.User
	}
	if ep.User == "" {
		return nil, sshTargetErrorf("write user@host, or set User for the host in ~/.ssh/config",
			"no user to log in to %s as, and the local user name is unknown", r.alias)
	}
	tokens := map[byte]string{
		'd': r.env.Home, 'u': r.env.User, 'h': ep.Host, 'r': ep.User, 'p': strconv.Itoa(ep.Port), 'n': r.alias,
	}
	seen := map[string]bool{}
	for _, f := range r.identityFiles {
		p, err := r.env.expandPath(f.val, tokens, "IdentityFile "+f.val+" (from "+f.src+")")
		if err != nil {
			return nil, err
		}
		if !seen[p] {
			seen[p] = true
			ep.IdentityFiles = append(ep.IdentityFiles, p)
		}
	}
	for _, f := range r.knownHosts {
		if strings.EqualFold(f.val, "none") || f.val == os.DevNull || f.val == "/dev/null" {
			ep.Warnings = append(ep.Warnings, fmt.Sprintf("UserKnownHostsFile %s (from %s) is ignored: "+
				"dispatch checks host keys against a known_hosts file it can keep; the default one is used", f.val, f.src))
			continue
		}
		p, err := r.env.expandPath(f.val, tokens, "UserKnownHostsFile "+f.val+" (from "+f.src+")")
		if err != nil {
			return nil, err
		}
		ep.KnownHostsFiles = append(ep.KnownHostsFiles, p)
	}
	if r.proxyCommand != "" {
		pc, err := expandSSHPercent(r.proxyCommand, map[byte]string{
			'h': ep.Host, 'p': strconv.Itoa(ep.Port), 'r': ep.User, 'n': r.alias,
		})
		if err != nil {
			return nil, sshTargetErrorf("use %h (host), %p (port), %r (remote user), %n (alias) or %% for a literal %",
				"ProxyCommand (from %s): %v", r.proxyCommandSrc, err)
		}
		ep.ProxyCommand = pc
	}
	return ep, nil
}

// expandPath expands a leading ~ and, when tokens is not nil, ssh's %
// tokens, and makes the path absolute: a relative path is taken from the home
// directory (ssh would take it from its working directory, which for dispatch
// is arbitrary). what names the value in errors.
func (e Env) expandPath(p string, tokens map[byte]string, what string) (string, error) {
	if strings.HasPrefix(p, "~") {
		rest := p[1:]
		if rest != "" && rest[0] != '/' {
			return "", sshTargetErrorf("write the full path", "%s: ~%s is not supported, only ~ for your own home directory",
				what, strings.SplitN(rest, "/", 2)[0])
		}
		if e.Home == "" {
			return "", sshTargetErrorf("write the full path", "%s: the home directory is not known", what)
		}
		p = e.Home + rest
	}
	if tokens != nil {
		var err error
		if p, err = expandSSHPercent(p, tokens); err != nil {
			return "", sshTargetErrorf(sshPercentFix, "%s: %v", what, err)
		}
	}
	if !filepath.IsAbs(p) {
		if e.Home == "" {
			return "", sshTargetErrorf("write the full path", "%s is relative and the home directory is not known", what)
		}
		p = filepath.Join(e.Home, p)
	}
	return filepath.Clean(p), nil
}

// expandSSHPercent replaces ssh's %x tokens; an unknown one is an error, as in ssh.
func expandSSHPercent(s string, tokens map[byte]string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		if i+1 == len(s) {
			return "", errors.New("it ends with a lone %")
		}
		i++
		if s[i] == '%' {
			b.WriteByte('%')
			continue
		}
		v, ok := tokens[s[i]]
		if !ok {
			r, _ := utf8.DecodeRuneInString(s[i:])
			return "", fmt.Errorf("%%%c is not supported", r)
		}
		b.WriteString(v)
	}
	return b.String(), nil
}

// parseSSHDestination splits [user@]host[:port], [user@][addr]:port, a bare IPv6
// address or ssh://[user@]host[:port]. The user is everything before the last
// @, as in ssh.
func parseSSHDestination(s string) (usr, host, port string, err error) {
	orig := s
	if rest, ok := strings.CutPrefix(s, "ssh://"); ok {
		s = strings.TrimSuffix(rest, "/")
		if strings.Contains(s, "/") {
			return "", "", "", sshTargetErrorf("write ssh://[user@]host[:port] without a path", "%q has a path", orig)
		}
	}
	if at := strings.LastIndexByte(s, '@'); at >= 0 {
		usr, s = s[:at], s[at+1:]
		if usr == "" {
			return "", "", "", sshTargetErrorf("write user@host, or just host", "%q has an empty user before @", orig)
		}
		if s == "" {
			return "", "", "", sshTargetErrorf(fmt.Sprintf("write the host after the @, e.g. %shost", orig),
				"%q has a user but no host", orig)
		}
	}
	switch n := strings.Count(s, ":"); {
	case strings.HasPrefix(s, "["):
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return "", "", "", sshTargetErrorf("write an IPv6 address as [addr] or [addr]:port", "%q has an unclosed [", orig)
		}
		host = s[1:end]
		if after := s[end+1:]; after != "" {
			if after[0] != ':' {
				return "", "", "", sshTargetErrorf("write an IPv6 address as [addr] or [addr]:port",
					"%q has %q after the ]", orig, after)
			}
			port = after[1:]
			if port == "" {
				return "", "", "", sshTargetErrorf(sshPortFix, "%q ends with : but no port", orig)
			}
		}
	case n == 1:
		host, port, _ = strings.Cut(s, ":")
		if port == "" {
			return "", "", "", sshTargetErrorf(sshPortFix, "%q ends with : but no port", orig)
		}
	case n > 1:
		if _, err := netip.ParseAddr(s); err != nil {
			return "", "", "", sshTargetErrorf("write an IPv6 address as [addr]:port, and a host with a port as host:port",
				"%q has several colons but is not an IPv6 address", orig)
		}
		host = s
	default:
		host = s
	}
	if err := checkSSHHost(host); err != nil {
		fix := "write [user@]host[:port] or a Host alias of ~/.ssh/config"
		if strings.HasPrefix(host, "-") {
			fix = "put options before the host, and the host last"
		}
		if host == orig {
			return "", "", "", sshTargetErrorf(fix, "host %q %v", host, err)
		}
		return "", "", "", sshTargetErrorf(fix, "host %q in %q %v", host, orig, err)
	}
	if port != "" {
		if _, ok := parseSSHPort(port); !ok {
			return "", "", "", sshTargetErrorf(sshPortFix, "port %q in %q is not a number from 1 to 65535", port, orig)
		}
	}
	return usr, host, port, nil
}

func checkSSHHost(h string) error {
	switch {
	case h == "":
		return errors.New("is empty")
	case strings.HasPrefix(h, "-"):
		return errors.New("starts with '-'")
	case strings.ContainsFunc(h, func(r rune) bool { return r <= ' ' || r == 0x7f || r == '/' }):
		return errors.New("has a space, '/' or a control character")
	}
	return nil
}

// parseSSHJump splits a ProxyJump value into its hops, checking each one.
func parseSSHJump(val, src string) ([]string, error) {
	var hops []string
	for _, hop := range strings.Split(val, ",") {
		if strings.TrimSpace(hop) == "" {
			return nil, sshTargetErrorf("separate hops with single commas, e.g. -J bastion,admin@gw:2222",
				"ProxyJump %q (from %s) has an empty hop", val, src)
		}
		if _, _, _, err := parseSSHDestination(hop); err != nil {
			te := err.(*TargetError)
			return nil, &TargetError{Msg: fmt.Sprintf("ProxyJump (from %s): %s", src, te.Msg), Fix: te.Fix}
		}
		hops = append(hops, hop)
	}
	return hops, nil
}

func parseSSHPort(s string) (int, bool) {
	if s == "" || len(s) > 5 || strings.Trim(s, "0123456789") != "" {
		return 0, false
	}
	p, _ := strconv.Atoi(s)
	return p, p >= 1 && p <= 65535
}

func parseSSHYesNo(s string) (bool, bool) {
	switch strings.ToLower(s) {
	case "yes", "true":
		return true, true
	case "no", "false":
		return false, true
	}
	return false, false
}

// parseSSHTime reads a time the way ssh's convtime does: seconds, or a
// sequence of numbers with s, m, h, d or w units, as in 1m30s.
func parseSSHTime(s string) (time.Duration, bool) {
	units := map[byte]time.Duration{
		's': time.Second, 'm': time.Minute, 'h': time.Hour, 'd': 24 * time.Hour, 'w': 7 * 24 * time.Hour,
	}
	var total time.Duration
	for s != "" {
		i := 0
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		if i == 0 || i > 9 {
			return 0, false
		}
		n, _ := strconv.Atoi(s[:i])
		unit := time.Second
		s = s[i:]
		if s != "" {
			u, ok := units[s[0]|0x20]
			if !ok {
				return 0, false
			}
			unit, s = u, s[1:]
		}
		total += time.Duration(n) * unit
		if total > 365*24*time.Hour {
			return 0, false
		}
	}
	return total, true
}

// splitSSHWords splits s into words the way a POSIX shell would, without any
// expansion: whitespace separates words, '...' is literal, "..." is literal
// except for \ before $ ` " \ or a newline, and \ outside quotes escapes the
// next character. Unquoted shell operators and $ are refused: a shell would
// give them a meaning that dispatch, which runs no shell, cannot.
func splitSSHWords(s string) ([]string, error) {
	var words []string
	var b strings.Builder
	inWord := false
	const quoteFix = "close the quote; to put a ' inside single quotes, write '\\''"
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			if inWord {
				words = append(words, b.String())
				b.Reset()
				inWord = false
			}
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, sshTargetErrorf(quoteFix, "the single quote at offset %d of ssh: is never closed", i)
			}
			b.WriteString(s[i+1 : i+1+j])
			i += 1 + j
			inWord = true
		case c == '"':
			start, closed := i, false
			for i++; i < len(s); i++ {
				if s[i] == '"' {
					closed = true
					break
				}
				if s[i] == '\\' && i+1 < len(s) && strings.IndexByte("$`\"\\\n", s[i+1]) >= 0 {
					i++
					if s[i] != '\n' {
						b.WriteByte(s[i])
					}
					continue
				}
				if s[i] == '$' || s[i] == '`' {
					return nil, sshShellCharError(s[i])
				}
				b.WriteByte(s[i])
			}
			if !closed {
				return nil, sshTargetErrorf(quoteFix, "the double quote at offset %d of ssh: is never closed", start)
			}
			inWord = true
		case c == '\\':
			if i+1 == len(s) {
				return nil, sshTargetErrorf("remove the trailing backslash, or write \\\\ for a backslash",
					"ssh: ends with a backslash")
			}
			i++
			if s[i] != '\n' {
				b.WriteByte(s[i])
				inWord = true
			}
		case strings.IndexByte(";|&<>()`$", c) >= 0:
			return nil, sshShellCharError(c)
		default:
			b.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, b.String())
	}
	return words, nil
}

func sshShellCharError(c byte) error {
	return sshTargetErrorf("write the value out (~ works in file names), or put the character in single quotes "+
		"if it is meant literally",
		"ssh: has an unquoted %c; dispatch runs no shell, so nothing would expand or interpret it", c)
}

// sshConfigArgs splits a config value holding several arguments, as ssh does:
// whitespace separates them and "..." or '...' groups.
func sshConfigArgs(s string) ([]string, error) {
	var args []string
	for s = strings.TrimSpace(s); s != ""; s = strings.TrimSpace(s) {
		if q := s[0]; q == '"' || q == '\'' {
			end := strings.IndexByte(s[1:], q)
			if end < 0 {
				return nil, fmt.Errorf("the quote in %q is never closed", s)
			}
			args = append(args, s[1:1+end])
			s = s[2+end:]
			continue
		}
		end := strings.IndexAny(s, " \t")
		if end < 0 {
			end = len(s)
		}
		args = append(args, s[:end])
		s = s[end:]
	}
	return args, nil
}

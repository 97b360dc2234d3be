package nodes

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"gopkg.in/yaml.v3"

	"github.com/dispatch-tool/dispatch/internal/yamlval"
	"github.com/dispatch-tool/dispatch/notify"
	"github.com/dispatch-tool/dispatch/spec"
)

// Keys are the keys nodes.yaml accepts, by section: "top", "controller",
// "node", "slurm", "sandbox_paths", "api_mode" and "tool". docs/CONFIGURATION.md's
// reference is checked against them.
var Keys = map[string][]string{
	"top":           {"controller", "nodes", "api_modes", "routes", "tools", "notify"},
	"controller":    {"poll_interval", "heartbeat_timeout", "node_offline_timeout", "max_retries", "retry_backoff", "retry_backoff_max", "max_fix_rounds", "ssh_connect_timeout", "max_parallel_ssh", "collect_max_bytes", "collect_max_files", "retention", "log_max_size", "preemption"},
	"preemption":    {"priority_gap", "grace"},
	"node":          {"name", "ssh", "slots", "spares", "api_mode", "api_modes", "work_dir", "tool", "min_free_mem", "tags", "dangerous", "strict_host_key_checking", "stall_timeout", "sandbox", "sandbox_paths", "limits", "network", "slurm"},
	"slurm":         {"partition", "account", "qos", "time", "max_pending", "extra"},
	"sandbox_paths": {"ro", "rw"},
	"api_mode":      {"env", "max_concurrency", "dangerous", "fallback"},
	"tool":          {"command", "model_flag"},
}

// Config is a parsed and validated nodes.yaml.
type Config struct {
	File       string // the path it was read from, for messages
	Controller Controller
	Nodes      []Node             // in file order
	APIModes   map[string]APIMode // never nil
	Routes     map[string]string  // task type => node tag; never nil
	Tools      map[string]Tool    // additions to and overrides of the built-in tools; never nil
	// Notify is where every project's messages go unless its project.yaml
	// has a notify block of its own; nil for none.
	Notify *notify.Config
}

// Controller holds the controller's timing and limits, with the defaults of
// SPEC §4 for every key the file leaves out.
type Controller struct {
	PollInterval       time.Duration
	HeartbeatTimeout   time.Duration
	NodeOfflineTimeout time.Duration
	RetryBackoff       time.Duration
	RetryBackoffMax    time.Duration
	SSHConnectTimeout  time.Duration
	MaxRetries         int
	MaxFixRounds       int
	MaxParallelSSH     int
	// CollectMaxBytes and CollectMaxFiles cap what one task's output/ may
	// bring back to runs/ (collect_max_bytes, collect_max_files): an output
	// over either is not collected and fails the task.
	CollectMaxBytes int64
	CollectMaxFiles int
	// Retention is how many ended runs every project keeps unless its
	// project.yaml says (retention:); unset keeps them all.
	Retention yamlval.Retention
	// LogMaxSize is the size at which the controller's dispatch.log is
	// rotated (log_max_size; three old logs are kept).
	LogMaxSize int64
	// Preemption lets an urgent task stop a much less urgent one
	// (preemption:); off unless nodes.yaml says.
	Preemption Preemption
}

// DefaultLogMaxSize is log_max_size when nodes.yaml leaves it out.
const DefaultLogMaxSize = 50 << 20

// Node is one machine that runs tasks.
type Node struct {
	Name string
	// SSH is how to reach the node: an ssh command line, user@host[:port] or a
	// ~/.ssh/config Host alias. Empty means the local machine.
	SSH   string
	Slots int // tasks run at once; at least 1
	// Spares is how many spare checkouts of a git-native project's base
	// the node keeps ready for its next launches (see wrapper git-spare):
	// Slots unless nodes.yaml says (0 turns them off).
	Spares  int
	APIMode string // a key of Config.APIModes, or "" for none
	// APIModes are the other api_modes tasks may run under here, when
	// APIMode is paused and names them as fallbacks.
	APIModes []string
	// Stall is the node's stall_timeout: a task whose tool writes nothing
	// for this long is stopped; 0 leaves it to the default.
	Stall time.Duration
	// WorkDir is absolute or starts with "~/" (see ExpandHome); default DefaultWorkDir.
	WorkDir string
	Tool    string // default tool of tasks on this node; "" leaves it to the task
	// MinFreeMem is the memory, in bytes, the node must have available before a
	// task starts on it; 0 means no check.
	MinFreeMem int64
	Tags       []string
	Dangerous  bool // tools may run with their dangerous flags here
	// Sandbox is whether tasks run sandboxed here (issue 20): SandboxOn
	// (always: a task that says sandbox: off cannot run here), SandboxAuto
	// (where bwrap works; a task may say off) or SandboxOff (never: a
	// task that says on cannot run here). nodes.yaml's default is
	// SandboxAuto; "" (a Node not read from nodes.yaml) is SandboxOff.
	Sandbox string
	// SandboxPaths are the node's paths opened into its sandbox
	// (sandbox_paths): toolchains and caches, each absolute or starting
	// with ~/ (expanded on the node, as work_dir is).
	SandboxPaths SandboxPaths
	// Limits are the node's default limits of its tasks (issue 20): each
	// one a task's front matter or project.yaml does not set.
	Limits yamlval.Limits
	// Network is the node's default network of its tasks (issue 20):
	// yamlval.NetworkOpen, yamlval.NetworkNone (its tasks then need the
	// sandbox) or "" (not set: open).
	Network string
	// StrictHostKeyChecking is "yes" (the default: unknown host keys are refused)
	// or "accept-new" (an unknown key is recorded on first connection).
	StrictHostKeyChecking string
	// Slurm, when set, makes the node a Slurm cluster (slurm:): SSH is
	// its login host and each attempt one batch job.
	Slurm *Slurm
	Line  int // line of the node in the file
}

// SandboxPaths are paths opened into a node's sandbox: RO read-only, RW
// read-write (shared by every task of the node).
type SandboxPaths struct {
	RO []string
	RW []string
}

// Values of Node.Sandbox, and of a task's sandbox (spec, project.yaml).
const (
	SandboxOn   = "on"
	SandboxOff  = "off"
	SandboxAuto = "auto"
)

// MaxSpares is the most spare checkouts a node keeps per base.
const MaxSpares = 64

// IsLocal reports whether the node is the local machine (ssh null, absent or "").
func (n Node) IsLocal() bool { return n.SSH == "" }

// Node returns the node called name.
func (c *Config) Node(name string) (Node, bool) {
	for _, n := range c.Nodes {
		if n.Name == name {
			return n, true
		}
	}
	return Node{}, false
}

// APIMode is a named environment for the tools, typically an API endpoint and
// its credentials.
type APIMode struct {
	// Env is added to the tool's environment. Values may hold ${VAR}, expanded
	// from the controller's environment at launch time with ExpandEnv, so secrets
	// stay out of the file.
	Env map[string]string
	// MaxConcurrency limits the tasks running with this mode across all nodes
	// (an account-level limit); 0 means no limit.
	MaxConcurrency int
	Dangerous      bool // tools may run with their dangerous flags in this mode
	// Fallback are the modes, in order, that tasks of this mode run under
	// while it is paused by a rate limit (on nodes allowed them).
	Fallback []string
}

// NodeSlots lists the nodes in nodes.yaml's order with their slots,
// address ("local" for the local node), stall_timeout and sandbox: setting, for the read
// models (readmodel.Nodes). A nil Config has none.
func (c *Config) NodeSlots() []struct {
	Name    string
	Slots   int
	Address string
	Stall   time.Duration
	Sandbox string
} {
	if c == nil {
		return nil
	}
	out := make([]struct {
		Name    string
		Slots   int
		Address string
		Stall   time.Duration
		Sandbox string
	}, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i].Name, out[i].Slots, out[i].Address, out[i].Stall, out[i].Sandbox = n.Name, n.Slots, n.SSH, n.Stall, n.Sandbox
		if n.IsLocal() {
			out[i].Address = "local"
		}
	}
	return out
}

// Fallbacks lists the fallbacks of an api_mode, in order; none for a nil
// Config or an unknown mode.
func (c *Config) Fallbacks(apiMode string) []string {
	if c == nil {
		return nil
	}
	return c.APIModes[apiMode].Fallback
}

// Modes returns the api_modes tasks may run under on n: its api_mode, then
// its api_modes, without duplicates.
func (n Node) Modes() []string {
	var out []string
	for _, m := range append([]string{n.APIMode}, n.APIModes...) {
		if m != "" && !contains(out, m) {
			out = append(out, m)
		}
	}
	return out
}

// Tool is an agent command line defined in nodes.yaml.
type Tool struct {
	// Command is the argv; "{spec}" in an argument is replaced by the path of the
	// task's spec.md on the node.
	Command   []string
	ModelFlag string // e.g. "--model"; "" when the tool takes no model
}

// ConfigError is one problem in nodes.yaml, with the line it is on and how to
// fix it; its Err is the underlying error, such as fs.ErrNotExist for a
// missing file.
type ConfigError = yamlval.Problem

// ConfigErrors is every problem found in one nodes.yaml, in line order. Load and
// Parse return it, never an empty one.
type ConfigErrors = yamlval.Problems

var defaultController = Controller{
	PollInterval:       30 * time.Second,
	HeartbeatTimeout:   2 * time.Minute,
	NodeOfflineTimeout: 5 * time.Minute,
	RetryBackoff:       30 * time.Second,
	RetryBackoffMax:    5 * time.Minute,
	SSHConnectTimeout:  10 * time.Second,
	MaxRetries:         2,
	MaxFixRounds:       2,
	MaxParallelSSH:     16,
	CollectMaxBytes:    2 << 30,
	CollectMaxFiles:    100_000,
	LogMaxSize:         DefaultLogMaxSize,
}

const defaultSlots = 1

const (
	// DefaultWorkDir is a node's work_dir when nodes.yaml gives none: a
	// hidden directory no one clones into, so that task workspaces never
	// land in a checkout (of dispatch or of a project).
	DefaultWorkDir = "~/.dispatch/work"
)

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

const (
	nameFix = "use letters, digits, '.', '_' and '-', starting with a letter or digit, without '..'"
)

// MaxConfigSize is the largest nodes.yaml Load reads: a thousand nodes fit
// in a tenth of it, and a larger file is a mistake that would cost the
// YAML parser many times its size in memory.
const MaxConfigSize = 1 << 20

// Load reads and validates the nodes.yaml at path. It only reads: a regular
// file of at most MaxConfigSize, opened without blocking (a FIFO is
// reported, not waited on).
func Load(path string) (*Config, error) {
	data, err := spec.ReadFile(path, MaxConfigSize)
	var tooLarge *spec.TooLargeError
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, ConfigErrors{{File: path, Msg: "the file does not exist",
			Fix: "run `dispatch init` to create one, or pass --config with the path of your nodes.yaml", Err: err}}
	case errors.Is(err, spec.ErrNotRegular):
		return nil, ConfigErrors{{File: path, Msg: "not a regular file",
			Fix: "replace it with a plain text nodes.yaml, or pass --config with the path of one", Err: err}}
	case errors.As(err, &tooLarge):
		return nil, ConfigErrors{{File: path, Msg: "the file is larger than " + spec.SizeString(MaxConfigSize),
			Fix: "a nodes.yaml lists nodes and settings: check that --config names the right file", Err: err}}
	}
	if err != nil {
		return nil, ConfigErrors{{File: path, Msg: fmt.Sprintf("cannot read the file: %v", err),
			Fix: "check that it is a readable file", Err: err}}
	}
	return Parse(path, data)
}

// Parse validates the content of a nodes.yaml; file names it in errors. Every
// problem found is reported, as ConfigErrors.
func Parse(file string, data []byte) (*Config, error) {
	p := &parser{file: file, at: map[string]*yaml.Node{}, allTags: map[string]bool{}}
	p.Doc = yamlval.Doc{Problems: &p.errs, File: file}
	cfg := p.parse(data)
	if len(p.errs) > 0 {
		p.errs.Sort()
		return nil, p.errs
	}
	return cfg, nil
}

type parser struct {
	yamlval.Doc
	file string
	errs ConfigErrors
	// at holds the value nodes that crossCheck reports on, by "section.name.key".
	at map[string]*yaml.Node
	// tags is every tag of every node, including nodes with errors, so that one
	// bad node does not also make routes to its tags fail.
	allTags map[string]bool
}

func (p *parser) parse(data []byte) *Config {
	if !utf8.Valid(data) {
		line := 1 + bytes.Count(data[:invalidUTF8(data)], []byte("\n"))
		p.ErrorAt(line, "save the file as UTF-8", "the file is not valid UTF-8")
		return nil
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil && err != io.EOF {
		p.yamlError(err, data)
		return nil
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		p.Errorf(&extra, "keep one document: remove the second '---' and what follows, or merge it into the first",
			"the file holds more than one YAML document")
	} else if err != io.EOF {
		p.yamlError(err, data)
		return nil
	}
	if doc.Kind == 0 || len(doc.Content) == 0 || yamlval.IsNull(doc.Content[0]) {
		p.ErrorAt(1, "describe at least one node under nodes: (`dispatch init` writes an example)", "the file is empty")
		return nil
	}
	root := yamlval.Resolve(doc.Content[0])
	f, ok := p.fields(root, "", "nodes.yaml", Keys["top"]...)
	if !ok {
		return nil
	}
	cfg := &Config{
		File:       p.file,
		Controller: p.controller(f["controller"].val),
		APIModes:   p.apiModes(f["api_modes"].val),
		Tools:      p.tools(f["tools"].val),
	}
	cfg.Nodes = p.nodes(root, f["nodes"])
	cfg.Routes = p.routes(f["routes"].val)
	if v := f["notify"].val; v != nil && !yamlval.IsNull(v) {
		cfg.Notify = notify.FromYAML(p.Doc, v)
	}
	p.crossCheck(cfg)
	return cfg
}

func (p *parser) yamlError(err error, data []byte) {
	line, msg := yamlval.SyntaxError(err, data)
	p.ErrorAt(line, "check the indentation (spaces, not tabs) and the quoting near this line",
		"invalid YAML: %s", msg)
}

func invalidUTF8(data []byte) int {
	for i := 0; i < len(data); {
		r, size := utf8.DecodeRune(data[i:])
		if r == utf8.RuneError && size <= 1 {
			return i
		}
		i += size
	}
	return len(data)
}

// pair is one key and its value in a mapping.
type pair struct{ key, val *yaml.Node }

// fields returns the pairs of mapping n by key, reporting keys not in known and
// keys given twice. A null n is an empty mapping. where prefixes messages; what
// names n when it is not a mapping.
func (p *parser) fields(n *yaml.Node, where, what string, known ...string) (map[string]pair, bool) {
	out := map[string]pair{}
	if n == nil || yamlval.IsNull(n) {
		return out, true
	}
	pairs, ok := p.mapping(n, what)
	if !ok {
		return out, false
	}
	for _, kv := range pairs {
		k := kv.key.Value
		if !contains(known, k) {
			p.Unknown(kv.key, prefix(where), known)
			continue
		}
		out[k] = kv
	}
	return out, true
}

// mapping returns the pairs of mapping n in order, with "<<" merge keys
// expanded (keys written in n win), and reports duplicate and non-string
// keys (yamlval.Doc.Mapping, the one reader of every file's mappings).
func (p *parser) mapping(n *yaml.Node, what string) ([]pair, bool) {
	kvs, ok := p.Mapping(n, what)
	pairs := make([]pair, len(kvs))
	for i, kv := range kvs {
		pairs[i] = pair{kv.Key, kv.Val}
	}
	return pairs, ok
}

func (p *parser) controller(n *yaml.Node) Controller {
	c := defaultController
	f, _ := p.fields(n, "controller", "controller", Keys["controller"]...)
	for _, d := range []struct {
		key string
		dst *time.Duration
	}{
		{"poll_interval", &c.PollInterval},
		{"heartbeat_timeout", &c.HeartbeatTimeout},
		{"node_offline_timeout", &c.NodeOfflineTimeout},
		{"retry_backoff", &c.RetryBackoff},
		{"retry_backoff_max", &c.RetryBackoffMax},
		{"ssh_connect_timeout", &c.SSHConnectTimeout},
	} {
		if v := f[d.key].val; v != nil && !yamlval.IsNull(v) {
			p.at["controller."+d.key] = v
			if got, ok := p.Duration(v, "controller", d.key); ok {
				*d.dst = got
			}
		}
	}
	for _, i := range []struct {
		key string
		dst *int
		min int
	}{
		{"max_retries", &c.MaxRetries, 0},
		{"max_fix_rounds", &c.MaxFixRounds, 0},
		{"max_parallel_ssh", &c.MaxParallelSSH, 1},
		{"collect_max_files", &c.CollectMaxFiles, 1},
	} {
		if v := f[i.key].val; v != nil && !yamlval.IsNull(v) {
			if got, ok := p.Int(v, "controller", i.key, i.min, yamlval.MaxInt); ok {
				*i.dst = got
			}
		}
	}
	if v := f["collect_max_bytes"].val; v != nil && !yamlval.IsNull(v) {
		if got, ok := p.Size(v, "controller", "collect_max_bytes"); ok {
			if got <= 0 {
				p.Errorf(v, "write a size such as 2GiB", "controller: collect_max_bytes must be more than 0")
			} else {
				c.CollectMaxBytes = got
			}
		}
	}
	if v := f["log_max_size"].val; v != nil && !yamlval.IsNull(v) {
		if got, ok := p.Size(v, "controller", "log_max_size"); ok {
			if got < 1<<16 {
				p.Errorf(v, "write a size such as 50MiB", "controller: log_max_size must be at least 64KiB")
			} else {
				c.LogMaxSize = got
			}
		}
	}
	if v := f["retention"].val; v != nil && !yamlval.IsNull(v) {
		c.Retention, _ = p.Retention(v, "controller", "retention")
	}
	if v := f["preemption"].val; v != nil && !yamlval.IsNull(v) {
		c.Preemption = p.preemption(v)
	}
	return c
}

func (p *parser) nodes(root *yaml.Node, kv pair) []Node {
	if kv.val == nil || yamlval.IsNull(kv.val) {
		line := root.Line
		if kv.key != nil {
			line = kv.key.Line
		}
		p.ErrorAt(line, "list the machines that run tasks, e.g.\n    nodes:\n      - name: local\n        ssh: null",
			"no nodes are defined")
		return nil
	}
	seq := kv.val
	if seq.Kind != yaml.SequenceNode {
		p.Errorf(seq, "write each node as a list item starting with `- name: ...`",
			"nodes must be a list, not %s", yamlval.Describe(seq))
		return nil
	}
	if len(seq.Content) == 0 {
		p.Errorf(kv.key, "add at least one node, e.g. `- {name: local, ssh: null}`", "nodes is empty")
		return nil
	}
	var out []Node
	seen := map[string]int{}
	for _, item := range seq.Content {
		item = yamlval.Resolve(item)
		if item.Kind == yaml.ScalarNode && !yamlval.IsNull(item) {
			p.Errorf(item, fmt.Sprintf("write the node as a mapping: `- name: %s`", item.Value),
				"a node must be a mapping of name, ssh, slots, ..., not %s", yamlval.Describe(item))
			continue
		}
		n, ok := p.node(item)
		if !ok {
			continue
		}
		if first, dup := seen[n.Name]; dup {
			p.Errorf(item, "give every node its own name", "node name %q is used twice (first on line %d)", n.Name, first)
			continue
		}
		seen[n.Name] = n.Line
		out = append(out, n)
	}
	return out
}

func (p *parser) node(item *yaml.Node) (Node, bool) {
	n := Node{Slots: defaultSlots, WorkDir: DefaultWorkDir, Sandbox: SandboxAuto, StrictHostKeyChecking: "yes", Line: item.Line}
	where := "node"
	if name := peekName(item); name != "" {
		where = fmt.Sprintf("node %q", name)
	}
	f, ok := p.fields(item, where, "a node", Keys["node"]...)
	if !ok {
		return n, false
	}
	n.Name, ok = p.nodeName(item, f["name"].val, where)
	if v := f["ssh"].val; v != nil && !yamlval.IsNull(v) {
		if s, sok := p.Scalar(v, where, "ssh"); sok {
			n.SSH = strings.TrimSpace(s)
			if fields := strings.Fields(n.SSH); len(fields) > 0 && fields[0] == "gcloud" {
				p.Errorf(v, "run `gcloud compute config-ssh` once, then use the Host alias it writes to ~/.ssh/config "+
					"(e.g. ssh: INSTANCE.ZONE.PROJECT)",
					"%s: ssh is a gcloud command, not an SSH command line", where)
			}
		}
	}
	if v := f["slots"].val; v != nil && !yamlval.IsNull(v) {
		if s, iok := p.Int(v, where, "slots", 1, yamlval.MaxInt); iok {
			n.Slots = s
		}
	}
	n.Spares = min(n.Slots, MaxSpares)
	if v := f["spares"].val; v != nil && !yamlval.IsNull(v) {
		if s, iok := p.Int(v, where, "spares", 0, MaxSpares); iok {
			n.Spares = s
		}
	}
	if v := f["api_mode"].val; v != nil && !yamlval.IsNull(v) {
		n.APIMode, _ = p.Scalar(v, where, "api_mode")
		p.at["node."+n.Name+".api_mode"] = v
	}
	if v := f["api_modes"].val; v != nil && !yamlval.IsNull(v) {
		n.APIModes = p.names(v, where, "api_modes")
		p.at["node."+n.Name+".api_modes"] = v
	}
	if v := f["stall_timeout"].val; v != nil && !yamlval.IsNull(v) {
		n.Stall, _ = p.Duration(v, where, "stall_timeout")
	}
	if v := f["work_dir"].val; v != nil && !yamlval.IsNull(v) {
		if s, sok := p.Scalar(v, where, "work_dir"); sok {
			// Clean first: "~/.." would otherwise pass and clean to ".".
			if c := path.Clean(s); c == "~" || strings.HasPrefix(c, "~/") || path.IsAbs(c) {
				n.WorkDir = c
			} else {
				p.Errorf(v, "write an absolute path or one starting with ~/, e.g. ~/.dispatch/work",
					"%s: work_dir %q must be absolute or start with ~/", where, s)
			}
		}
	}
	if v := f["tool"].val; v != nil && !yamlval.IsNull(v) {
		n.Tool, _ = p.Scalar(v, where, "tool")
		p.at["node."+n.Name+".tool"] = v
	}
	if v := f["min_free_mem"].val; v != nil && !yamlval.IsNull(v) {
		n.MinFreeMem, _ = p.Size(v, where, "min_free_mem")
	}
	if v := f["tags"].val; v != nil && !yamlval.IsNull(v) {
		n.Tags = p.tags(v, where)
	}
	if v := f["dangerous"].val; v != nil && !yamlval.IsNull(v) {
		n.Dangerous, _ = p.Bool(v, where, "dangerous")
	}
	p.nodeConfinement(&n, f, where)
	if v := f["slurm"].val; v != nil {
		// `slurm:` alone is a cluster with every default.
		n.Slurm = p.slurm(v, where, n.Slots)
	}
	if v := f["strict_host_key_checking"].val; v != nil && !yamlval.IsNull(v) {
		if s, sok := p.Scalar(v, where, "strict_host_key_checking"); sok {
			if s == "yes" || s == "accept-new" {
				n.StrictHostKeyChecking = s
			} else {
				p.Errorf(v, "use yes (unknown hosts are refused; trust one with `dispatch nodes trust NODE`) "+
					"or accept-new (record an unknown host's key on first connection)",
					"%s: strict_host_key_checking must be yes or accept-new, not %q", where, s)
			}
		}
	}
	return n, ok
}

// nodeName reads a node's name (v, nil when the node has none); false when
// it is missing or not valid (reported).
func (p *parser) nodeName(item, v *yaml.Node, where string) (string, bool) {
	if v == nil || yamlval.IsNull(v) {
		p.Errorf(item, "add `name: <name>` to the node", "a node has no name")
		return "", false
	}
	name, ok := p.Scalar(v, where, "name")
	switch {
	case !ok:
		return "", false
	case !validName(name):
		p.Errorf(v, nameFix, "node name %q is not valid", name)
		return "", false
	}
	return name, true
}

// nodeConfinement reads what confines a node's tasks: sandbox,
// sandbox_paths (under the node's work_dir, read before), network and limits.
func (p *parser) nodeConfinement(n *Node, f map[string]pair, where string) {
	if v := f["sandbox"].val; v != nil && !yamlval.IsNull(v) {
		if s, sok := p.Sandbox(v, where, "sandbox"); sok {
			n.Sandbox = s
		}
	}
	if v := f["sandbox_paths"].val; v != nil && !yamlval.IsNull(v) {
		n.SandboxPaths = p.sandboxPaths(v, where, n.WorkDir)
	}
	if v := f["network"].val; v != nil && !yamlval.IsNull(v) {
		if s, ok := p.Network(v, where, "network"); ok {
			n.Network = s
			if yamlval.NetworkConfined(s) && (n.Sandbox == "" || n.Sandbox == SandboxOff) {
				p.Errorf(v, "set sandbox: on (or auto) on the node, or write network: open",
					"%s: network: %s needs the sandbox, and the node has sandbox: off", where, yamlval.NetworkWord(s))
			}
		}
	}
	if v := f["limits"].val; v != nil && !yamlval.IsNull(v) {
		n.Limits, _ = p.Limits(v, where, "limits")
	}
}

// sandboxPaths reads a node's sandbox_paths: {ro: [paths], rw: [paths]}.
func (p *parser) sandboxPaths(v *yaml.Node, where, workDir string) SandboxPaths {
	var out SandboxPaths
	f, ok := p.fields(v, where+" sandbox_paths", "sandbox_paths", Keys["sandbox_paths"]...)
	if !ok {
		return out
	}
	seen := map[string]string{}
	for _, key := range Keys["sandbox_paths"] {
		list := yamlval.Resolve(f[key].val)
		if list == nil || yamlval.IsNull(list) {
			continue
		}
		if list.Kind != yaml.SequenceNode {
			p.Errorf(list, fmt.Sprintf("write it as a list, e.g. sandbox_paths: {%s: [~/go/pkg/mod]}", key),
				"%s: sandbox_paths %s must be a list, not %s", where, key, yamlval.Describe(list))
			continue
		}
		for _, item := range list.Content {
			item = yamlval.Resolve(item)
			s, sok := p.Scalar(item, where, "sandbox_paths "+key)
			if !sok {
				continue
			}
			c, why, fix := SandboxPathProblem(s, workDir)
			if why != "" {
				p.Errorf(item, fix, "%s: sandbox_paths %s: %q %s", where, key, s, why)
				continue
			}
			if other, dup := seen[c]; dup {
				p.Errorf(item, "list each path once, under ro or rw",
					"%s: sandbox_paths %s: %q is already listed under %s", where, key, s, other)
				continue
			}
			seen[c] = key
			if key == "ro" {
				out.RO = append(out.RO, c)
			} else {
				out.RW = append(out.RW, c)
			}
		}
	}
	return out
}

// SandboxPathProblem checks one path of sandbox_paths against the node's
// work_dir (as nodes.yaml writes both: absolute or ~/...). It returns the
// path cleaned, or why it cannot be opened into the sandbox and the fix.
func SandboxPathProblem(s, workDir string) (clean, why, fix string) {
	const example = "e.g. ~/go/pkg/mod or /opt/cache"
	if s != "~" && !strings.HasPrefix(s, "~/") && !path.IsAbs(s) {
		return "", "must be absolute or start with ~/", "write an absolute path or one starting with ~/, " + example
	}
	for _, part := range strings.Split(s, "/") {
		if part == ".." {
			return "", "must not contain ..", "write the path without .., " + example
		}
	}
	c := path.Clean(s)
	switch {
	case c == "/":
		return "", "would open the whole file system", "list the directories the tasks need, " + example
	case c == "~":
		return "", "would open the node user's whole home (its ~/.ssh, its credentials)",
			"list the directories under the home the tasks need, " + example
	}
	wd := path.Clean(workDir)
	comparable := strings.HasPrefix(c, "~") == strings.HasPrefix(wd, "~")
	inside := func(p, root string) bool { return p == root || strings.HasPrefix(p, root+"/") }
	switch {
	case comparable && inside(c, path.Join(wd, ".bin")):
		return "", "is inside the work_dir's .bin (the wrapper and its private records)",
			"open a toolchain or cache of its own, never the wrapper's directory"
	case comparable && inside(wd, c):
		return "", fmt.Sprintf("is the work_dir %s or holds it: every task's files would be open", workDir),
			"list a directory that does not hold the work_dir, " + example
	case comparable && inside(c, wd):
		return "", fmt.Sprintf("is inside the work_dir %s, which the sandbox keeps from the tasks", workDir),
			"keep shared caches outside the work_dir, " + example
	}
	return c, "", ""
}

// names reads a list of api_mode names.
func (p *parser) names(v *yaml.Node, where, key string) []string {
	v = yamlval.Resolve(v)
	if v.Kind != yaml.SequenceNode {
		p.Errorf(v, fmt.Sprintf("write %s as a list, e.g. %s: [zai2]", key, key), "%s%s must be a list, not %s", prefix(where), key, yamlval.Describe(v))
		return nil
	}
	var out []string
	for _, item := range v.Content {
		item = yamlval.Resolve(item)
		if s, ok := p.Scalar(item, where, key); ok && !contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

func (p *parser) tags(v *yaml.Node, where string) []string {
	if v.Kind != yaml.SequenceNode {
		fix := "write tags as a list, e.g. tags: [glm]"
		if v.Kind == yaml.ScalarNode {
			fix = fmt.Sprintf("write tags as a list: tags: [%s]", v.Value)
		}
		p.Errorf(v, fix, "%s: tags must be a list, not %s", where, yamlval.Describe(v))
		return nil
	}
	var tags []string
	for _, t := range v.Content {
		t = yamlval.Resolve(t)
		s, ok := p.Scalar(t, where, "tag")
		if !ok {
			continue
		}
		if !validName(s) {
			p.Errorf(t, nameFix, "%s: tag %q is not valid", where, s)
			continue
		}
		tags = append(tags, s)
		p.allTags[s] = true
	}
	return tags
}

// entries returns the pairs of the optional mapping n: none when it is
// absent, null or (reported) not a mapping.
func (p *parser) entries(n *yaml.Node, what string) []pair {
	if n == nil || yamlval.IsNull(n) {
		return nil
	}
	pairs, _ := p.mapping(n, what)
	return pairs
}

// definition returns the name an entry of api_modes or tools defines
// (reported when it is not valid) and the `kind "name"` its messages start with.
func (p *parser) definition(kv pair, kind string) (name, where string) {
	name = kv.key.Value
	if !validName(name) {
		p.Errorf(kv.key, nameFix, "%s name %q is not valid", kind, name)
	}
	return name, fmt.Sprintf("%s %q", kind, name)
}

func (p *parser) apiModes(n *yaml.Node) map[string]APIMode {
	out := map[string]APIMode{}
	for _, kv := range p.entries(n, "api_modes") {
		name, where := p.definition(kv, "api_mode")
		m := APIMode{Env: map[string]string{}}
		f, _ := p.fields(kv.val, where, where, Keys["api_mode"]...)
		if v := f["env"].val; v != nil && !yamlval.IsNull(v) {
			m.Env = p.env(v, where)
		}
		if v := f["max_concurrency"].val; v != nil && !yamlval.IsNull(v) {
			m.MaxConcurrency, _ = p.Int(v, where, "max_concurrency", 0, yamlval.MaxInt)
		}
		if v := f["dangerous"].val; v != nil && !yamlval.IsNull(v) {
			m.Dangerous, _ = p.Bool(v, where, "dangerous")
		}
		if v := f["fallback"].val; v != nil && !yamlval.IsNull(v) {
			m.Fallback = p.names(v, where, "fallback")
			p.at["api_mode."+name+".fallback"] = v
		}
		out[name] = m
	}
	return out
}

func (p *parser) env(n *yaml.Node, where string) map[string]string {
	out := map[string]string{}
	for _, kv := range p.entries(n, where+" env") {
		name := kv.key.Value
		switch {
		case !envNameRE.MatchString(name):
			p.Errorf(kv.key, "use letters, digits and '_', not starting with a digit",
				"%s: %q is not a valid environment variable name", where, name)
			continue
		case strings.HasPrefix(name, "DISPATCH_"):
			p.Errorf(kv.key, "rename it: DISPATCH_* variables are set by dispatch for every task",
				"%s: env %s would be overwritten by dispatch", where, name)
			continue
		}
		v := kv.val
		if yamlval.IsNull(v) {
			p.Errorf(v, `write "" for an empty value, or ${VAR} to take it from the controller's environment`,
				"%s: env %s has no value", where, name)
			continue
		}
		if v.Kind != yaml.ScalarNode {
			p.Errorf(v, `write the value as one string, e.g. "3000000"`,
				"%s: env %s must be a string, not %s", where, name, yamlval.Describe(v))
			continue
		}
		if _, err := ExpandEnv(v.Value, func(string) (string, bool) { return "", true }); err != nil {
			p.Errorf(v, "write ${NAME} to use a variable of the controller's environment and $$ for a literal $",
				"%s: env %s: %v", where, name, err)
			continue
		}
		out[name] = v.Value
	}
	return out
}

func (p *parser) routes(n *yaml.Node) map[string]string {
	out := map[string]string{}
	for _, kv := range p.entries(n, "routes") {
		typ := kv.key.Value
		if !contains(spec.Types, typ) {
			fix := "route one of the task types: " + strings.Join(spec.Types, ", ")
			if s := yamlval.Suggest(typ, spec.Types); s != "" {
				fix = fmt.Sprintf("did you mean %q? %s", s, fix)
			}
			p.Errorf(kv.key, fix, "routes: %q is not a task type", typ)
			continue
		}
		if tag, ok := p.Scalar(kv.val, "routes", typ); ok {
			out[typ] = tag
			p.at["routes."+typ] = kv.val
		}
	}
	return out
}

func (p *parser) tools(n *yaml.Node) map[string]Tool {
	out := map[string]Tool{}
	for _, kv := range p.entries(n, "tools") {
		name, where := p.definition(kv, "tool")
		f, ok := p.fields(kv.val, where, where, Keys["tool"]...)
		if !ok {
			out[name] = Tool{}
			continue
		}
		var t Tool
		const cmdFix = `give the command as a list of arguments, e.g. command: [my-agent, --prompt-file, "{spec}"]`
		switch v := f["command"].val; {
		case v == nil || yamlval.IsNull(v):
			line := kv.key
			if f["command"].key != nil {
				line = f["command"].key
			}
			p.Errorf(line, cmdFix, "%s has no command", where)
		case v.Kind != yaml.SequenceNode:
			p.Errorf(v, cmdFix, "%s: command must be a list, not %s", where, yamlval.Describe(v))
		case len(v.Content) == 0:
			p.Errorf(v, cmdFix, "%s: command is empty", where)
		default:
			for i, a := range v.Content {
				a = yamlval.Resolve(a)
				s, sok := p.Scalar(a, where, "command argument")
				if !sok {
					continue
				}
				if i == 0 && strings.TrimSpace(s) == "" {
					p.Errorf(a, cmdFix, "%s: the program (first item of command) is empty", where)
				}
				t.Command = append(t.Command, s)
			}
		}
		if v := f["model_flag"].val; v != nil && !yamlval.IsNull(v) {
			t.ModelFlag, _ = p.Scalar(v, where, "model_flag")
		}
		out[name] = t // even when invalid, so nodes naming it get no second error
	}
	return out
}

// crossCheck validates references between sections, once every section is read.
func (p *parser) crossCheck(cfg *Config) {
	c := cfg.Controller
	if c.RetryBackoffMax < c.RetryBackoff {
		at := p.at["controller.retry_backoff_max"]
		if at == nil {
			at = p.at["controller.retry_backoff"]
		}
		p.Errorf(at, fmt.Sprintf("make retry_backoff_max at least retry_backoff (%s)", c.RetryBackoff),
			"controller: retry_backoff_max (%s) is less than retry_backoff (%s)", c.RetryBackoffMax, c.RetryBackoff)
	}

	modes := sortedKeys(cfg.APIModes)
	tools := append(append([]string(nil), spec.BuiltinTools...), sortedKeys(cfg.Tools)...)
	for _, n := range cfg.Nodes {
		if n.APIMode != "" {
			if _, ok := cfg.APIModes[n.APIMode]; !ok {
				fix := fmt.Sprintf("define it under api_modes: (e.g. `%s: {}`) or remove api_mode from the node", n.APIMode)
				if len(modes) > 0 {
					fix = fmt.Sprintf("use one of the defined modes (%s) or define %q under api_modes:", strings.Join(modes, ", "), n.APIMode)
				}
				p.Errorf(p.at["node."+n.Name+".api_mode"], fix, "node %q: api_mode %q is not defined", n.Name, n.APIMode)
			}
		}
		for _, m := range n.APIModes {
			if _, ok := cfg.APIModes[m]; !ok {
				p.Errorf(p.at["node."+n.Name+".api_modes"], fmt.Sprintf("use defined modes (%s) or define %q under api_modes:", strings.Join(modes, ", "), m),
					"node %q: api_modes names %q, which is not defined", n.Name, m)
			}
		}
		if n.Tool != "" && !contains(tools, n.Tool) {
			p.Errorf(p.at["node."+n.Name+".tool"],
				fmt.Sprintf("use one of %s, or define %q under tools:", strings.Join(tools, ", "), n.Tool),
				"node %q: tool %q is not defined", n.Name, n.Tool)
		}
	}
	for _, name := range modes {
		for _, fb := range cfg.APIModes[name].Fallback {
			switch _, ok := cfg.APIModes[fb]; {
			case fb == name:
				p.Errorf(p.at["api_mode."+name+".fallback"], "remove it: a mode cannot stand in for itself",
					"api_mode %q: fallback names the mode itself", name)
			case !ok:
				p.Errorf(p.at["api_mode."+name+".fallback"], fmt.Sprintf("use defined modes (%s) or define %q under api_modes:", strings.Join(modes, ", "), fb),
					"api_mode %q: fallback %q is not defined", name, fb)
			}
		}
	}
	for _, typ := range sortedKeys(cfg.Routes) {
		tag := cfg.Routes[typ]
		if p.allTags[tag] {
			continue
		}
		fix := fmt.Sprintf("add %q to the tags of the nodes that should run %s tasks", tag, typ)
		if len(p.allTags) > 0 {
			fix += fmt.Sprintf(", or route to a tag in use (%s)", strings.Join(sortedKeys(p.allTags), ", "))
		}
		p.Errorf(p.at["routes."+typ], fix, "routes: %s goes to tag %q, which no node has", typ, tag)
	}
}

// ExpandEnv replaces every ${NAME} in s with lookup(NAME); see
// yamlval.ExpandEnv.
func ExpandEnv(s string, lookup func(string) (string, bool)) (string, error) {
	return yamlval.ExpandEnv(s, lookup)
}

// peekName returns the name of node item for messages, before it is validated.
func peekName(item *yaml.Node) string {
	if item.Kind != yaml.MappingNode {
		return ""
	}
	for i := 0; i+1 < len(item.Content); i += 2 {
		if k, v := yamlval.Resolve(item.Content[i]), yamlval.Resolve(item.Content[i+1]); k.Value == "name" && v.Kind == yaml.ScalarNode && !yamlval.IsNull(v) {
			return v.Value
		}
	}
	return ""
}

func validName(s string) bool { return spec.ValidName(s) == nil }

func prefix(where string) string {
	if where == "" {
		return ""
	}
	return where + ": "
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

package nodes

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/internal/yamlval"
)

func fixture(name string) string { return filepath.Join("testdata", name, "nodes.yaml") }

func node(name string, line int, edit func(*Node)) Node {
	n := Node{Name: name, Slots: 1, Spares: -1, WorkDir: "~/.dispatch/work", Sandbox: SandboxAuto, StrictHostKeyChecking: "yes", Line: line}
	if edit != nil {
		edit(&n)
	}
	if n.Spares == -1 { // not set by edit: the default
		n.Spares = min(n.Slots, MaxSpares)
	}
	return n
}

func TestLoad(t *testing.T) {
	tests := []struct {
		name string
		want *Config
	}{
		{"spec_example", &Config{
			Controller: defaultController,
			Nodes: []Node{
				node("mac1", 13, func(n *Node) { n.Slots, n.APIMode, n.Tags, n.WorkDir = 2, "direct", []string{"glm"}, "~/dispatch" }),
				node("mac2", 19, func(n *Node) {
					n.SSH, n.Slots, n.APIMode = "ssh -i ~/.ssh/mac2 -p 22 user@192.168.4.63", 5, "zai"
					n.MinFreeMem, n.Tags, n.WorkDir = 2<<30, []string{"glm"}, "~/dispatch"
				}),
				node("codex-node-1", 26, func(n *Node) {
					n.SSH, n.Slots, n.Tool, n.Tags = "codex-node-1.us-west1-b.myproject", 8, "codex", []string{"codex"}
				}),
			},
			APIModes: map[string]APIMode{
				"direct": {Env: map[string]string{}},
				"zai": {Env: map[string]string{
					"ANTHROPIC_BASE_URL":   "https://api.z.ai/api/anthropic",
					"ANTHROPIC_AUTH_TOKEN": "${ZAI_API_KEY}",
					"API_TIMEOUT_MS":       "3000000",
				}, MaxConcurrency: 10},
			},
			Routes: map[string]string{"implementation": "glm", "integration": "codex", "verification": "codex", "fix": "codex"},
			Tools:  map[string]Tool{"mytool": {Command: []string{"my-agent", "--prompt-file", "{spec}"}}},
		}},
		{"minimal", &Config{
			Controller: defaultController,
			Nodes:      []Node{node("local", 2, nil)},
			APIModes:   map[string]APIMode{}, Routes: map[string]string{}, Tools: map[string]Tool{},
		}},
		{"controller_null", &Config{
			Controller: defaultController,
			Nodes:      []Node{node("local", 3, nil)},
			APIModes:   map[string]APIMode{"direct": {Env: map[string]string{}}},
			Routes:     map[string]string{}, Tools: map[string]Tool{},
		}},
		{"all_keys", &Config{
			Controller: Controller{
				PollInterval: 5 * time.Second, HeartbeatTimeout: 90 * time.Second, NodeOfflineTimeout: time.Hour,
				RetryBackoff: time.Second, RetryBackoffMax: time.Second, SSHConnectTimeout: 2500 * time.Millisecond,
				MaxRetries: 0, MaxFixRounds: 0, MaxParallelSSH: 1, CollectMaxBytes: 512 << 20, CollectMaxFiles: 10,
				Retention: yamlval.Retention{Runs: 5, Days: 14, Set: true}, LogMaxSize: 1 << 20,
			},
			Nodes: []Node{{
				Name: "gpu_box.2", SSH: "deploy@gpu.example.com:2222", Slots: 3, APIMode: "fast",
				WorkDir: "/srv/dispatch", Tool: "mine", MinFreeMem: 512 << 20, Tags: []string{"gpu", "big-mem"},
				Dangerous: true, Sandbox: SandboxAuto, StrictHostKeyChecking: "accept-new", Line: 17,
			}},
			APIModes: map[string]APIMode{"fast": {
				Env: map[string]string{"KEY": "${FAST_KEY}", "PRICE": "$$5", "N": "3"}, Dangerous: true,
			}},
			Routes: map[string]string{"test_debug": "gpu", "simple_fix": "big-mem"},
			Tools: map[string]Tool{
				"mine":   {Command: []string{"mine", "run", "{spec}", ""}, ModelFlag: "--model"},
				"claude": {Command: []string{"claude", "-p"}},
			},
		}},
		{"ssh_forms", &Config{
			Controller: defaultController,
			Nodes: []Node{
				node("absent", 2, nil),
				node("null-ssh", 3, nil),
				node("tilde-ssh", 5, nil),
				node("empty-ssh", 7, nil),
				node("blank-ssh", 9, nil),
				node("alias", 11, func(n *Node) { n.SSH = "codex-node-1.us-west1-b.myproject" }),
				node("user-host-port", 13, func(n *Node) { n.SSH = "me@10.0.0.5:2200" }),
				node("command-line", 15, func(n *Node) { n.SSH = "ssh -i ~/.ssh/id -p 22 me@host" }),
			},
			APIModes: map[string]APIMode{}, Routes: map[string]string{}, Tools: map[string]Tool{},
		}},
		{"anchors", &Config{
			Controller: defaultController,
			Nodes: []Node{
				node("a", 2, func(n *Node) { n.Slots, n.Tags, n.WorkDir = 4, []string{"linux"}, "/data/dispatch" }),
				node("b", 7, func(n *Node) { n.Slots, n.Tags, n.WorkDir = 8, []string{"linux"}, "/data/dispatch" }),
			},
			APIModes: map[string]APIMode{}, Routes: map[string]string{"implementation": "linux"}, Tools: map[string]Tool{},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			file := fixture(tc.name)
			got, err := Load(file)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			tc.want.File = file
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Load:\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestLoadSizes(t *testing.T) {
	cfg, err := Load(fixture("sizes"))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	want := map[string]int64{
		"plain": 1 << 30, "zero": 0, "gib": 2 << 30, "mib": 512 << 20, "gb-fraction": 1_500_000_000,
		"bare-g": 2_000_000_000, "kb": 64_000, "kib-lower": 4096, "tib": 1 << 40, "bytes-unit": 100, "spaced": 3 << 20,
	}
	if len(cfg.Nodes) != len(want) {
		t.Fatalf("got %d nodes, want %d", len(cfg.Nodes), len(want))
	}
	for _, n := range cfg.Nodes {
		if n.MinFreeMem != want[n.Name] {
			t.Errorf("node %s: MinFreeMem = %d, want %d", n.Name, n.MinFreeMem, want[n.Name])
		}
	}
}

// wantErr is one expected problem: its line and substrings of its message and fix.
type wantErr struct {
	line int
	msg  string
	fix  string
}

func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name string
		want []wantErr
	}{
		{"empty_file", []wantErr{{1, "the file is empty", "dispatch init"}}},
		{"comments_only", []wantErr{{1, "the file is empty", "nodes:"}}},
		{"null_document", []wantErr{{1, "the file is empty", ""}}},
		{"syntax_error", []wantErr{{3, "invalid YAML: did not find expected ',' or ']'", "indentation"}}},
		{"tab_indent", []wantErr{{3, "invalid YAML", "not tabs"}}},
		{"invalid_utf8", []wantErr{{3, "not valid UTF-8", "UTF-8"}}},
		{"top_level_list", []wantErr{{1, "nodes.yaml must be a mapping, not a list", "key: value"}}},
		{"unknown_top_key", []wantErr{{1, `unknown key "node"`, `did you mean "nodes"?`}}},
		{"unknown_node_key", []wantErr{{3, `node "a": unknown key "slot"`, `did you mean "slots"?`}}},
		{"unknown_controller_key", []wantErr{{2, `controller: unknown key "poll_intervall"`, `did you mean "poll_interval"?`}}},
		{"duplicate_key", []wantErr{{3, `nodes.yaml: duplicate key "nodes" (first on line 1)`, "remove one"}}},
		{"multiple_documents", []wantErr{{3, "more than one YAML document", "'---'"}}},
		{"no_nodes", []wantErr{{1, "no nodes are defined", "nodes:"}}},
		{"empty_nodes", []wantErr{{3, "nodes is empty", "at least one node"}}},
		{"nodes_mapping", []wantErr{{2, "nodes must be a list, not a mapping", "- name:"}}},
		{"node_scalar", []wantErr{{2, `a node must be a mapping`, "`- name: mac1`"}}},
		{"missing_name", []wantErr{{3, "a node has no name", "name:"}}},
		{"name_space", []wantErr{{2, `node name "my node" is not valid`, "letters, digits"}}},
		{"name_dotdot", []wantErr{{2, `node name "a..b" is not valid`, "without '..'"}}},
		{"name_leading_dot", []wantErr{{2, `node name ".hidden" is not valid`, "starting with a letter or digit"}}},
		{"name_slash", []wantErr{{2, `node name "a/b" is not valid`, ""}}},
		{"name_shell", []wantErr{{2, `node name "a;rm -rf" is not valid`, ""}}},
		{"duplicate_node", []wantErr{{4, `node name "mac1" is used twice (first on line 2)`, "own name"}}},
		{"slots_zero", []wantErr{{3, `node "a": slots must be at least 1, not 0`, "1 or more"}}},
		{"slots_string", []wantErr{{3, `node "a": slots must be a whole number, at least 1, not "two"`, "slots: 2"}}},
		{"slots_float", []wantErr{{3, `slots must be a whole number, at least 1, not 2.5`, ""}}},
		{"spares_too_many", []wantErr{{4, `node "a": spares must be a whole number from 0 to 64, not 65`, "0 to 64"}}},
		{"tags_scalar", []wantErr{{3, `node "a": tags must be a list, not "glm"`, "tags: [glm]"}}},
		{"tag_invalid", []wantErr{{3, `node "a": tag "not ok" is not valid`, ""}}},
		{"dangerous_not_bool", []wantErr{{3, `node "a": dangerous must be true or false, not "sometimes"`, "dangerous: true"}}},
		{"duration_int", []wantErr{{2, `controller: poll_interval must be a duration, not 30`, "poll_interval: 30s"}}},
		{"duration_bad", []wantErr{{2, `controller: heartbeat_timeout: "2 minutes" is not a duration`, "1h30m"}}},
		{"duration_zero", []wantErr{{2, "controller: node_offline_timeout must be positive, not 0s", ""}}},
		{"duration_negative", []wantErr{{2, "controller: ssh_connect_timeout must be positive, not -5s", ""}}},
		{"backoff_max_less", []wantErr{{3, "retry_backoff_max (30s) is less than retry_backoff (1m0s)", "at least retry_backoff"}}},
		{"backoff_over_default_max", []wantErr{{2, "retry_backoff_max (5m0s) is less than retry_backoff (10m0s)", ""}}},
		{"max_retries_negative", []wantErr{{2, "controller: max_retries must be at least 0, not -1", ""}}},
		{"max_parallel_ssh_zero", []wantErr{{2, "controller: max_parallel_ssh must be at least 1, not 0", ""}}},
		{"controller_scalar", []wantErr{{1, `controller must be a mapping, not "30s"`, ""}}},
		{"undefined_api_mode", []wantErr{{3, `node "a": api_mode "zai" is not defined`, "defined modes (direct)"}}},
		{"undefined_api_mode_none", []wantErr{{3, `node "a": api_mode "direct" is not defined`, "`direct: {}`"}}},
		{"api_mode_list", []wantErr{{4, `api_mode "zai" must be a mapping, not a list`, ""}}},
		{"max_concurrency_negative", []wantErr{{5, `api_mode "zai": max_concurrency must be at least 0, not -2`, ""}}},
		{"route_unknown_tag", []wantErr{{6, `routes: integration goes to tag "codex", which no node has`, "tag in use (glm)"}}},
		{"route_unknown_type", []wantErr{{5, `routes: "implementaion" is not a task type`, `did you mean "implementation"?`}}},
		{"route_not_string", []wantErr{{5, "routes: fix must be a string, not a list", ""}}},
		{"strict_host_key_bad", []wantErr{{4, `strict_host_key_checking must be yes or accept-new, not "no"`, "dispatch nodes trust"}}},
		{"tool_empty_command", []wantErr{{5, `tool "mytool": command is empty`, "command: [my-agent"}}},
		{"tool_missing_command", []wantErr{{4, `tool "mytool" has no command`, ""}}},
		{"tool_command_string", []wantErr{{4, `tool "mytool": command must be a list`, "list of arguments"}}},
		{"tool_empty_program", []wantErr{{4, `tool "mytool": the program (first item of command) is empty`, ""}}},
		{"tool_unknown_key", []wantErr{{4, `tool "mytool": unknown key "cmd"`, "command, model_flag"}, {4, `tool "mytool" has no command`, ""}}},
		{"node_unknown_tool", []wantErr{{3, `node "a": tool "codx" is not defined`, "claude, codex, gemini, shell"}}},
		{"env_unclosed", []wantErr{{6, `api_mode "zai": env TOKEN: ${ at offset 0 is not closed by }`, "${NAME}"}}},
		{"env_bad_var_name", []wantErr{{6, "env TOKEN: ${1X}", ""}, {7, "env OTHER: ${}", ""}}},
		{"env_bare_dollar", []wantErr{{6, "env PATH_EXTRA: $ at offset 0 must start ${NAME} or be doubled as $$", "$$ for a literal $"}}},
		{"env_null", []wantErr{{6, "env TOKEN has no value", `""`}}},
		{"env_bad_key", []wantErr{{6, `"1BAD" is not a valid environment variable name`, ""}}},
		{"env_dispatch_key", []wantErr{{6, "env DISPATCH_TASK would be overwritten by dispatch", ""}}},
		{"env_list", []wantErr{{6, "env TOKENS must be a string, not a list", ""}}},
		{"gcloud_ssh", []wantErr{{3, `node "codex-node-1": ssh is a gcloud command`, "gcloud compute config-ssh"}}},
		{"size_bad_unit", []wantErr{{3, `min_free_mem: "2XB" has an unknown unit "XB"`, "2GiB"}}},
		{"size_negative", []wantErr{{3, `min_free_mem: "-1GiB" is not a size`, ""}}},
		{"size_list", []wantErr{{3, "min_free_mem must be a size, not a list", ""}}},
		{"size_overflow", []wantErr{{3, `"100000000TiB" is too large`, ""}}},
		{"work_dir_relative", []wantErr{{3, `work_dir "dispatch" must be absolute or start with ~/`, "~/.dispatch/work"}}},
		{"work_dir_user", []wantErr{{3, `work_dir "~bob/dispatch" must be absolute`, ""}}},
		{"work_dir_dotdot", []wantErr{{3, `work_dir "~/.." must be absolute`, ""}}},
		{"many_errors", []wantErr{
			{2, `poll_interval: "soon" is not a duration`, ""},
			{3, `max_retries must be a whole number, at least 0, not "many"`, ""},
			{7, `node name "bad name" is not valid`, ""},
			{8, `node "bad name": slots must be at least 1, not 0`, ""},
			{10, `node "gc": ssh is a gcloud command`, ""},
			{11, `node "gc": api_mode "missing" is not defined`, ""},
			{13, `routes: fix goes to tag "nowhere"`, ""},
			{15, `tool "t": command is empty`, ""},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			file := fixture(tc.name)
			cfg, err := Load(file)
			if err == nil {
				t.Fatalf("Load succeeded with %+v, want errors", cfg)
			}
			var errs ConfigErrors
			if !errors.As(err, &errs) {
				t.Fatalf("Load error %T is not ConfigErrors: %v", err, err)
			}
			if len(errs) != len(tc.want) {
				t.Errorf("got %d errors, want %d:\n%v", len(errs), len(tc.want), err)
			}
			for i := 0; i < len(errs) && i < len(tc.want); i++ {
				got, want := errs[i], tc.want[i]
				if got.File != file || got.Line != want.line || !strings.Contains(got.Msg, want.msg) || !strings.Contains(got.Fix, want.fix) {
					t.Errorf("error %d = %s:%d %q (fix %q)\nwant      %s:%d containing %q (fix containing %q)",
						i, got.File, got.Line, got.Msg, got.Fix, file, want.line, want.msg, want.fix)
				}
				if got.Fix == "" {
					t.Errorf("error %d (%s) has no fix", i, got.Msg)
				}
			}
		})
	}
}

// TestFixturesUsed keeps testdata and the tables above in step.
func TestFixturesUsed(t *testing.T) {
	src, err := os.ReadFile("config_test.go")
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir("testdata")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if _, err := os.Stat(filepath.Join("testdata", e.Name(), "nodes.yaml")); err != nil {
			continue // not a nodes.yaml fixture
		}
		if !strings.Contains(string(src), `{"`+e.Name()+`", `) && !strings.Contains(string(src), `fixture("`+e.Name()+`")`) {
			t.Errorf("testdata/%s is not used by any test", e.Name())
		}
	}
}

func TestLoadMissingFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "nodes.yaml")
	_, err := Load(file)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Load of a missing file = %v, want an error wrapping fs.ErrNotExist", err)
	}
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.File != file || ce.Line != 0 {
		t.Fatalf("Load of a missing file = %#v, want a *ConfigError for %s without a line", err, file)
	}
	for _, s := range []string{file + ": ", "does not exist", "dispatch init", "--config"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not mention %q", err, s)
		}
	}
}

func TestLoadWritesNothing(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "nodes.yaml")
	for _, name := range []string{"spec_example", "many_errors"} {
		data, err := os.ReadFile(fixture(name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, data, 0o444); err != nil {
			t.Fatal(err)
		}
		_, _ = Load(file)
		entries, err := os.ReadDir(dir)
		if err != nil || len(entries) != 1 {
			t.Errorf("after Load(%s) the directory holds %v (%v), want only nodes.yaml", name, entries, err)
		}
		if err := os.Remove(file); err != nil {
			t.Fatal(err)
		}
	}
}

func TestConfigErrorFormat(t *testing.T) {
	tests := []struct {
		err  *ConfigError
		want string
	}{
		{&ConfigError{File: "nodes.yaml", Line: 4, Msg: "bad", Fix: "fix it"}, "nodes.yaml:4: bad\n  fix: fix it"},
		{&ConfigError{File: "nodes.yaml", Line: 4, Msg: "bad"}, "nodes.yaml:4: bad"},
		{&ConfigError{File: "nodes.yaml", Msg: "missing", Fix: "create it"}, "nodes.yaml: missing\n  fix: create it"},
		{&ConfigError{Line: 2, Msg: "bad"}, "line 2: bad"},
	}
	for _, tc := range tests {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("Error() = %q, want %q", got, tc.want)
		}
	}
	errs := ConfigErrors{tests[0].err, tests[1].err}
	if got, want := errs.Error(), tests[0].want+"\n"+tests[1].want; got != want {
		t.Errorf("ConfigErrors.Error() = %q, want %q", got, want)
	}
}

func TestParseNameInErrors(t *testing.T) {
	_, err := Parse("/home/op/nodes.yaml", []byte("nodes:\n  - name: a\n    slots: 0\n"))
	if err == nil || !strings.HasPrefix(err.Error(), "/home/op/nodes.yaml:3: ") {
		t.Errorf("Parse error = %v, want it to start with the file and line", err)
	}
}

func TestNodeLookup(t *testing.T) {
	cfg, err := Load(fixture("spec_example"))
	if err != nil {
		t.Fatal(err)
	}
	for name, local := range map[string]bool{"mac1": true, "mac2": false, "codex-node-1": false} {
		n, ok := cfg.Node(name)
		if !ok || n.Name != name || n.IsLocal() != local {
			t.Errorf("Node(%q) = %+v, %v; want it found with IsLocal() = %v", name, n, ok, local)
		}
	}
	if _, ok := cfg.Node("nope"); ok {
		t.Error(`Node("nope") was found`)
	}
}

func TestExpandEnv(t *testing.T) {
	env := map[string]string{"KEY": "s3cr3t", "EMPTY": "", "DOLLAR": "$HOME"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	tests := []struct {
		in, want, err string
	}{
		{in: "", want: ""},
		{in: "plain https://x/y", want: "plain https://x/y"},
		{in: "${KEY}", want: "s3cr3t"},
		{in: "Bearer ${KEY}!", want: "Bearer s3cr3t!"},
		{in: "${KEY}${KEY}", want: "s3cr3ts3cr3t"},
		{in: "${EMPTY}", want: ""},
		{in: "${DOLLAR}", want: "$HOME"}, // values are not expanded again
		{in: "$$", want: "$"},
		{in: "$${KEY}", want: "${KEY}"},
		{in: "price: $$5 {braces}", want: "price: $5 {braces}"},
		{in: "${MISSING}", err: "environment variable MISSING is not set"},
		{in: "${A} ${KEY} ${B} ${A}", err: "environment variables A, B are not set"},
		{in: "$KEY", err: "$ at offset 0 must start ${NAME}"},
		{in: "trailing $", err: "$ at offset 9"},
		{in: "${KEY", err: "${ at offset 0 is not closed by }"},
		{in: "${}", err: "${} at offset 0 is not a valid variable reference"},
		{in: "${1A}", err: "${1A}"},
		{in: "${A-B}", err: "${A-B}"},
		{in: "${KEY:-default}", err: "${KEY:-default}"},
	}
	for _, tc := range tests {
		got, err := ExpandEnv(tc.in, lookup)
		switch {
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("ExpandEnv(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("ExpandEnv(%q) = %q, %v; want an error containing %q", tc.in, got, err, tc.err)
		}
		if err != nil && strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("ExpandEnv(%q) error %q reveals a value", tc.in, err)
		}
	}
}

func TestCollectQuotas(t *testing.T) {
	base := "nodes:\n  - name: local\n"
	cfg, err := Parse("nodes.yaml", []byte(base))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Controller.CollectMaxBytes != 2<<30 || cfg.Controller.CollectMaxFiles != 100_000 {
		t.Errorf("default quotas = %d bytes, %d files; want 2 GiB and 100000", cfg.Controller.CollectMaxBytes, cfg.Controller.CollectMaxFiles)
	}
	cfg, err = Parse("nodes.yaml", []byte("controller:\n  collect_max_bytes: 512MiB\n  collect_max_files: 10\n"+base))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Controller.CollectMaxBytes != 512<<20 || cfg.Controller.CollectMaxFiles != 10 {
		t.Errorf("quotas = %d bytes, %d files; want 512 MiB and 10", cfg.Controller.CollectMaxBytes, cfg.Controller.CollectMaxFiles)
	}
	for _, bad := range []string{"collect_max_bytes: 0", "collect_max_bytes: lots", "collect_max_files: 0"} {
		if _, err := Parse("nodes.yaml", []byte("controller:\n  "+bad+"\n"+base)); err == nil {
			t.Errorf("%s accepted, want an error", bad)
		}
	}
}

// TestParseLimits: a node's limits are read and checked like a project's;
// a bad one stops the file.
func TestParseLimits(t *testing.T) {
	tests := []struct {
		name, limits string
		want         yamlval.Limits
		problem      string
	}{
		{"all", "{memory: 4GiB, cpu: 2, pids: 512, file_size: 8GiB}", yamlval.Limits{Memory: 4 << 30, CPU: 2, Pids: 512, FileSize: 8 << 30}, ""},
		{"memory only", "{memory: 200MiB}", yamlval.Limits{Memory: 200 << 20}, ""},
		{"no unit", "{memory: 4096}", yamlval.Limits{}, `node "a": limits.memory: 4096 has no unit`},
		{"zero size", "{file_size: 0GiB}", yamlval.Limits{}, `node "a": limits.file_size must be positive, not 0GiB`},
		{"negative pids", "{pids: -5}", yamlval.Limits{}, `node "a": limits.pids must be a whole number from 1 to 4194304, not -5`},
		{"unknown key", "{memory_max: 1GiB}", yamlval.Limits{}, `node "a": limits: unknown key "memory_max"`},
		{"scalar", "4GiB", yamlval.Limits{}, `node "a": limits must be a mapping`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Parse("nodes.yaml", []byte("nodes:\n  - name: a\n    limits: "+tc.limits+"\n"))
			if tc.problem == "" {
				if err != nil {
					t.Fatal(err)
				}
				if got := cfg.Nodes[0].Limits; got != tc.want {
					t.Errorf("limits %+v, want %+v", got, tc.want)
				}
				return
			}
			var errs ConfigErrors
			if !errors.As(err, &errs) || len(errs) != 1 || errs[0].Line != 3 || !strings.Contains(errs[0].Msg, tc.problem) || errs[0].Fix == "" {
				t.Errorf("Parse error %v; want one at line 3 containing %q, with a fix", err, tc.problem)
			}
		})
	}
}

// TestParseNetwork: a node's network is read like a project's; none needs
// the node's sandbox (on or auto), and so does an allow list.
func TestParseNetwork(t *testing.T) {
	tests := []struct {
		name, node string
		want       string
		problem    string
	}{
		{"unset", "", "", ""},
		{"open", "network: open", "open", ""},
		{"none with sandbox on", "sandbox: on\n    network: none", "none", ""},
		{"none with sandbox auto", "sandbox: auto\n    network: none", "none", ""},
		{"none with the default sandbox (auto)", "network: none", "none", ""},
		{"none with sandbox off", "sandbox: off\n    network: none", "", `node "a": network: none needs the sandbox, and the node has sandbox: off`},
		{"allow list", "sandbox: on\n    network: {allow: ['127.0.0.1:443', 'API.example.com:443']}", "allow:127.0.0.1:443,api.example.com:443", ""},
		{"allow list with sandbox off", "sandbox: off\n    network: {allow: []}", "", `node "a": network: {allow: [...]} needs the sandbox, and the node has sandbox: off`},
		{"other", "network: closed", "", `node "a": network must be open, none or {allow: [...]}, not "closed"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Parse("nodes.yaml", []byte("nodes:\n  - name: a\n    "+tc.node+"\n"))
			if tc.problem == "" {
				if err != nil {
					t.Fatal(err)
				}
				if got := cfg.Nodes[0].Network; got != tc.want {
					t.Errorf("network %q, want %q", got, tc.want)
				}
				return
			}
			var errs ConfigErrors
			if !errors.As(err, &errs) || len(errs) != 1 || !strings.Contains(errs[0].Msg, tc.problem) || errs[0].Fix == "" {
				t.Errorf("Parse error %v; want one containing %q, with a fix", err, tc.problem)
			}
		})
	}
}

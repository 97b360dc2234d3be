package yamlval

import (
	"testing"

	"gopkg.in/yaml.v3"
)

func limits(d Doc, v *yaml.Node) (any, bool) { return d.Limits(v, `node "a"`, "k") }

func TestLimitsReader(t *testing.T) {
	const fix = "\n  fix: write a positive size with a unit, e.g. 512MiB or 4GiB (KiB/MiB/GiB/TiB are powers of 1024, KB/MB/GB/TB of 1000)"
	runReads(t, []readCase{
		{"all", "k: {memory: 4GiB, cpu: 2, pids: 512, file_size: 8GiB}\n", limits, Limits{Memory: 4 << 30, CPU: 2, Pids: 512, FileSize: 8 << 30}, ""},
		{"some", "k: {memory: 200MiB}\n", limits, Limits{Memory: 200 << 20}, ""},
		{"decimal cpu and unit", "k: {cpu: 0.5, file_size: 1.5GB}\n", limits, Limits{CPU: 0.5, FileSize: 1500000000}, ""},
		{"no unit", "k: {memory: 4096}\n", limits, Limits{}, `f.yaml:2: node "a": k.memory: 4096 has no unit` + fix},
		{"quoted no unit", "k: {file_size: '4096'}\n", limits, Limits{}, `f.yaml:2: node "a": k.file_size: "4096" has no unit` + fix},
		{"zero", "k: {memory: 0MiB}\n", limits, Limits{}, `f.yaml:2: node "a": k.memory must be positive, not 0MiB` + fix},
		{"negative", "k: {memory: -1GiB}\n", limits, Limits{}, `f.yaml:2: node "a": k.memory: "-1GiB" is not a size` + fix},
		{"bad unit", "k: {memory: 4GB2}\n", limits, Limits{}, `f.yaml:2: node "a": k.memory: "4GB2" is not a size` + fix},
		{"zero pids", "k: {pids: 0}\n", limits, Limits{}, `f.yaml:2: node "a": k.pids must be a whole number from 1 to 4194304, not 0` + "\n  fix: write a whole number from 1 to 4194304"},
		{"negative cpu", "k: {cpu: -2}\n", limits, Limits{}, `f.yaml:2: node "a": k.cpu must be positive, not -2` + "\n  fix: write a positive number without quotes, e.g. 20 or 12.5"},
		{"typo", "k: {memroy: 1GiB}\n", limits, Limits{}, `f.yaml:2: node "a": k: unknown key "memroy"` + "\n  fix: did you mean \"memory\"? known keys: memory, cpu, pids, file_size"},
		{"not a mapping", "k: 4GiB\n", limits, Limits{}, `f.yaml:2: node "a": k must be a mapping, not "4GiB"` + "\n  fix: " + limitsFix},
		{"empty value", "k: {memory: }\n", limits, Limits{}, `f.yaml:2: node "a": k.memory is empty` + "\n  fix: " + limitsFix},
	})
}

func TestLimitsOver(t *testing.T) {
	node := Limits{Memory: 8 << 30, Pids: 1024, CPU: 4}
	project := Limits{Memory: 4 << 30, FileSize: 1 << 30}
	task := Limits{Pids: 64}
	got := task.Over(project.Over(node))
	want := Limits{Memory: 4 << 30, CPU: 4, Pids: 64, FileSize: 1 << 30}
	if got != want {
		t.Errorf("task over project over node = %+v, want %+v", got, want)
	}
	if s := got.String(); s != "memory 4GiB, cpu 4, pids 64, file_size 1GiB" {
		t.Errorf("String = %q", s)
	}
}

func network(d Doc, v *yaml.Node) (any, bool) { return d.Network(v, `node "a"`, "k") }

func TestNetworkReader(t *testing.T) {
	const fix = "\n  fix: write network: open (the node's network), network: none (no network but the task's own loopback) or network: {allow: [\"host:port\", ...]} (only those; both need the sandbox)"
	runReads(t, []readCase{
		{"open", "k: open\n", network, "open", ""},
		{"none", "k: none\n", network, "none", ""},
		{"case", "k: None\n", network, "none", ""},
		{"allow list", "k: {allow: ['api.Example.com:443', '127.0.0.1:8080', '[::1]:80', 'api.example.com:443']}\n", network, "allow:127.0.0.1:8080,[::1]:80,api.example.com:443", ""},
		{"allow wildcard", "k: {allow: ['*.github.com:443']}\n", network, "allow:*.github.com:443", ""},
		{"allow empty", "k: {allow: []}\n", network, "allow:", ""},
		{"allow no port", "k: {allow: ['example.com']}\n", network, "", `f.yaml:2: node "a": k.allow: "example.com" is not host:port (write e.g. api.example.com:443, 127.0.0.1:8080 or [::1]:8080)` + "\n  fix: write each entry as host:port"},
		{"allow bad port", "k: {allow: ['example.com:0']}\n", network, "", `f.yaml:2: node "a": k.allow: "example.com:0": the port must be a number from 1 to 65535` + "\n  fix: write each entry as host:port"},
		{"allow bad host", "k: {allow: ['ex ample.com:1']}\n", network, "", `f.yaml:2: node "a": k.allow: "ex ample.com:1": "ex ample.com" is not a host name or an IP address (a wildcard is written *.example.com)` + "\n  fix: write each entry as host:port"},
		{"allow not a list", "k: {allow: 'example.com:443'}\n", network, "", `f.yaml:2: node "a": k.allow must be a list of host:port, not "example.com:443"` + "\n  fix: write allow: [\"api.example.com:443\", \"127.0.0.1:8080\"] (an empty list allows only the tool's API)"},
		{"other key", "k: {deny: []}\n", network, "", `f.yaml:2: node "a": k must be open, none or {allow: [...]}, not a mapping` + fix},
		{"other", "k: closed\n", network, "", `f.yaml:2: node "a": k must be open, none or {allow: [...]}, not "closed"` + fix},
		{"bool", "k: false\n", network, "", `f.yaml:2: node "a": k must be open, none or {allow: [...]}, not false` + fix},
		{"empty mapping", "k: {}\n", network, "", `f.yaml:2: node "a": k must be open, none or {allow: [...]}, not a mapping` + fix},
	})
}

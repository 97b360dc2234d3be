package main

import (
	"fmt"
	"strings"
	"time"
)

// render writes RESULTS.md.
func render(o *options, m machine, sections []*section, took time.Duration) string {
	var b strings.Builder
	b.WriteString("# dispatch benchmarks (SPEC §11)\n\n")
	b.WriteString("Produced by `bench/` (`make bench`); do not edit by hand — rerun it.\n\n")
	fmt.Fprintf(&b, "**Command:** `%s`", o.command)
	if o.quick {
		b.WriteString(" with `BENCH_QUICK=1` (fewer repetitions)")
	}
	fmt.Fprintf(&b, " — took %s on %s.\n\n", took.Round(time.Second), m.Date)
	b.WriteString("| machine | |\n|---|---|\n")
	for _, kv := range [][2]string{{"CPU", m.CPU}, {"cores", m.Cores}, {"memory", m.Memory}, {"kernel", m.Kernel},
		{"Go", m.Go}, {"sshd", m.SSHD}, {"ssh", m.SSH}, {"GNU parallel", m.Parallel}, {"dispatch", m.Dispatch}, {"load average (1 min)", m.Load}, {"files", m.Files}} {
		fmt.Fprintf(&b, "| %s | %s |\n", kv[0], kv[1])
	}
	b.WriteString("\nEvery node is a real OpenSSH sshd on 127.0.0.1 started by `internal/sshdtest` (its own host key and " +
		"work directory, the test client's ed25519 key); nodes, controller and tasks share the machine's cores, and so " +
		"does whatever else runs on the machine (see the load average). Ratios come from runs made side by side in the " +
		"same bench run.\n\n")
	b.WriteString("## Targets\n\n| scenario | target | measured | |\n|---|---|---|---|\n")
	for _, s := range sections {
		for _, t := range s.targets {
			fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", t.name, t.want, t.got, verdict(t.met))
		}
	}
	b.WriteString("\n")
	b.WriteString(issue35Table(sections))
	var findings []string
	for _, key := range findingOrder {
		for _, s := range sections {
			for _, f := range s.findings {
				if f.key == key {
					findings = append(findings, f.text)
				}
			}
		}
	}
	if len(findings) > 0 {
		b.WriteString("## Where the time goes, and what to change\n\n")
		b.WriteString("From the profiles and timings below (CPU profiles with `runtime/pprof` of the controller running in the " +
			"bench process; the `.pprof` files are in bench/out/, read them with `go tool pprof`).\n\n")
		for i, f := range findings {
			fmt.Fprintf(&b, "%d. %s\n\n", i+1, f)
		}
	}
	for _, s := range sections {
		b.WriteString("## " + s.title + "\n\n" + s.body + "\n")
	}
	return b.String()
}

// Command bench runs the benchmarks of SPEC §11 against real OpenSSH sshd
// nodes on loopback and writes bench/RESULTS.md: throughput side by side
// with GNU parallel, the cost of one tick, detection latency of a killed
// agent, and the controller's memory. `make bench` runs it; BENCH_QUICK=1
// cuts the repetitions.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

type options struct {
	dispatch string // the dispatch binary
	out      string // RESULTS.md
	outDir   string // profiles
	quick    bool
	only     map[string]bool
	command  string
}

// pick returns quick under BENCH_QUICK=1, else full.
func (o *options) pick(quick, full int) int {
	if o.quick {
		return quick
	}
	return full
}

type target struct {
	name, want, got string
	met             bool
	// goal is the issue 35 goal the target measures (issue35Goals); ""
	// for none.
	goal string
}

type section struct {
	title   string
	body    string
	targets []target
	// findings are paragraphs for "Where the time goes, and what to
	// change": measured figures with the function to change.
	findings []finding
}

// finding is one paragraph; key orders them (findingOrder).
type finding struct{ key, text string }

var findingOrder = []string{"throughput", "tick", "memory", "detection", "chain", "repo", "sandbox", "sessions", "flow"}

var scenarios = []struct {
	name string
	run  func(context.Context, *options, *tb) (*section, error)
}{
	{"throughput", benchThroughput},
	{"tick", benchTick},
	{"memory", benchMemory},
	{"detection", benchDetection},
	{"chain", benchChain},
	{"repo", benchRepo},
	{"sandbox", benchSandbox},
	{"scale", benchScale},
	{"flow", benchFlow},
}

func main() {
	o := &options{}
	flag.StringVar(&o.dispatch, "dispatch", "bin/dispatch", "the dispatch binary (make build)")
	flag.StringVar(&o.out, "out", "bench/RESULTS.md", "where to write the results")
	flag.StringVar(&o.outDir, "profiles", "bench/out", "where to write CPU and heap profiles")
	only := flag.String("only", "", "comma-separated scenarios to run (throughput,tick,detection,memory,chain,repo,sandbox,scale,flow); default all")
	flag.StringVar(&o.command, "command", "", "the command line to record in RESULTS.md (default: this one)")
	flag.Parse()
	o.quick = os.Getenv("BENCH_QUICK") == "1"
	if *only != "" {
		o.only = map[string]bool{}
		for _, s := range strings.Split(*only, ",") {
			o.only[strings.TrimSpace(s)] = true
		}
	}
	if o.command == "" {
		o.command = strings.Join(os.Args, " ")
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(o *options) error {
	abs, err := filepath.Abs(o.dispatch)
	if err != nil {
		return err
	}
	o.dispatch = abs
	if _, err := os.Stat(o.dispatch); err != nil {
		return fmt.Errorf("no dispatch binary at %s (make build): %w", o.dispatch, err)
	}
	if o.outDir, err = filepath.Abs(o.outDir); err != nil {
		return err
	}
	if err := os.MkdirAll(o.outDir, 0o755); err != nil {
		return err
	}
	// Keys come from the test client's files only, never from an agent.
	os.Unsetenv("SSH_AUTH_SOCK")
	if err := ensureParallel(); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		interrupted.Store(true)
	}()

	root, err := os.MkdirTemp(benchBase(), "dispatch-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)
	spread := spreadDirs(root)

	m := describeMachine(o.dispatch)
	m.Files = describeFiles(root, spread)
	loadStart := loadAvg()
	fmt.Printf("bench: %s, %s cores, %s, %s, %s\n", m.CPU, m.Cores, m.Kernel, m.Go, m.SSHD)
	started := time.Now()
	var sections []*section
	var failures []string
	for _, sc := range scenarios {
		if o.only != nil && !o.only[sc.name] {
			continue
		}
		if ctx.Err() != nil {
			break
		}
		fmt.Printf("bench: == %s\n", sc.name)
		t := newTB(sc.name, root)
		scStart := time.Now()
		var sec *section
		err := guard(func() {
			var err error
			sec, err = sc.run(ctx, o, t)
			if err != nil {
				panic(benchAbort{err.Error()})
			}
		})
		t.cleanup()
		if err != nil {
			fmt.Printf("bench: %s failed: %v\n", sc.name, err)
			failures = append(failures, fmt.Sprintf("%s: %v", sc.name, err))
			sections = append(sections, &section{title: sc.name + " (failed)", body: "```\n" + err.Error() + "\n```\n"})
			continue
		}
		sec.body += fmt.Sprintf("\n_Scenario time: %s._\n", time.Since(scStart).Round(time.Second))
		sections = append(sections, sec)
		fmt.Printf("bench: %s done in %s\n", sc.name, time.Since(scStart).Round(time.Second))
		for _, tg := range sec.targets {
			fmt.Printf("bench:   %-11s %-55s %s → %s\n", tg.name, tg.want, tg.got, map[bool]string{true: "met", false: "NOT MET"}[tg.met])
		}
	}
	m.Load = fmt.Sprintf("%s when the bench started, %s when it ended", loadStart, loadAvg())
	doc := render(o, m, sections, time.Since(started))
	if err := os.WriteFile(o.out, []byte(doc), 0o644); err != nil {
		return err
	}
	fmt.Printf("bench: wrote %s (%s)\n", o.out, time.Since(started).Round(time.Second))
	if len(failures) > 0 {
		return fmt.Errorf("%d scenario(s) failed:\n  %s", len(failures), strings.Join(failures, "\n  "))
	}
	return nil
}

// benchBase is where the bench makes its homes and its nodes' work_dirs:
// $TMPDIR when set, else /var/tmp when it is there, as a real node's
// work_dir is on disk outside /tmp (its default is ~/.dispatch/work). A
// work_dir under /tmp costs each sandboxed attempt the mount points of
// its own paths, made on disk inside its /tmp (bwrap binds the attempt's
// tmp/ at /tmp before it binds them): 8 mkdirs an attempt here.
func benchBase() string {
	if os.Getenv("TMPDIR") != "" {
		return ""
	}
	const wOK, xOK = 2, 1 // access(2)
	if err := syscall.Access("/var/tmp", wOK|xOK); err == nil {
		return "/var/tmp"
	}
	return ""
}

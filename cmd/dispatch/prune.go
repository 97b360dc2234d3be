package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/dispatch-tool/dispatch/internal/termtext"
	"github.com/dispatch-tool/dispatch/prune"
	"github.com/dispatch-tool/dispatch/store"
)

func pruneCommand() *cli.Command {
	const synopsis = "dispatch prune [<project>] [--dry-run]"
	return &cli.Command{
		Name:      "prune",
		Usage:     "remove the runs retention lets go: archives, database rows, attempt directories on the nodes",
		ArgsUsage: "[<project>]",
		Flags:     []cli.Flag{&cli.BoolFlag{Name: "dry-run", Usage: "only say what would go"}},
		Action: func(c *cli.Context) error {
			e, err := newEnv(c)
			if err != nil {
				return err
			}
			project := ""
			switch c.NArg() {
			case 0:
			case 1:
				if project, err = projectArg(c, synopsis); err != nil {
					return err
				}
			default:
				return usagef(synopsis, "unexpected arguments: %v", c.Args().Slice()[1:])
			}
			cfg, err := e.loadConfig()
			if err != nil {
				return err
			}
			ro, err := e.openToUpgrade(c.Context)
			if err != nil {
				return err
			}
			if project != "" {
				err = knownProject(c.Context, ro, project)
			}
			ro.Close()
			if err != nil {
				return err
			}
			st, err := store.Open(c.Context, e.dbPath())
			if err != nil {
				return err
			}
			defer st.Close()
			p := &prune.Pruner{Store: st, Config: cfg, Home: e.home}
			dry := c.Bool("dry-run")
			var reps []prune.Report
			if project != "" {
				var r prune.Report
				r, err = p.Project(c.Context, project, dry)
				reps = []prune.Report{r}
			} else {
				reps, err = p.All(c.Context, dry)
			}
			problems := printPrune(e.out, reps, dry)
			if err != nil {
				return err
			}
			if problems > 0 {
				return &workFailed{msg: fmt.Sprintf("dispatch: %d problem(s); what was not removed is removed by the next prune", problems)}
			}
			return nil
		},
	}
}

// printPrune says, project by project, what the prune removed (or would);
// it returns the number of problems.
func printPrune(w io.Writer, reps []prune.Report, dry bool) int {
	verb := "pruned"
	if dry {
		verb = "would prune"
	}
	problems := 0
	for _, r := range reps {
		for _, msg := range r.Problems {
			// It may hold what a node answered.
			fmt.Fprintf(w, "PROBLEM %s\n", termtext.Clean(msg))
			problems++
		}
		if len(r.Runs) == 0 {
			fmt.Fprintf(w, "%s: nothing to prune (%s)\n", r.Project, retentionText(r))
			continue
		}
		var done, files, attempts, rows int
		var bytes int64
		for _, run := range r.Runs {
			note := ""
			if run.Unfinished {
				note = " (an earlier prune began it)"
			}
			if run.Left {
				fmt.Fprintf(w, "%s run %d%s: left for the next prune (see PROBLEM)\n", r.Project, run.Run, note)
				continue
			}
			fmt.Fprintf(w, "%s run %d%s: %d file(s), %s under runs/; %d attempt(s) and their node directories; %d database row(s)\n",
				r.Project, run.Run, note, run.Files, byteText(run.Bytes), run.Attempts, run.RowCount())
			done, files, bytes, attempts, rows = done+1, files+run.Files, bytes+run.Bytes, attempts+run.Attempts, rows+run.RowCount()
		}
		for _, b := range r.Branches {
			fmt.Fprintf(w, "%s branch %s at %s in %s\n", r.Project, strings.TrimPrefix(b.Ref, "refs/heads/"), b.Commit[:min(12, len(b.Commit))], b.Repo)
		}
		if len(r.Spares) > 0 {
			short := make([]string, len(r.Spares))
			for i, b := range r.Spares {
				short[i] = b[:min(12, len(b))]
			}
			fmt.Fprintf(w, "%s spare checkouts of base(s) %s on the nodes\n", r.Project, strings.Join(short, ", "))
		}
		left := ""
		if n := len(r.Runs) - done; n > 0 {
			left = fmt.Sprintf("; %d run(s) left for the next prune", n)
		}
		fmt.Fprintf(w, "%s %d run(s) of %s (%s): %d file(s), %s, %d attempt(s), %d row(s), %d branch(es)%s\n",
			verb, done, r.Project, retentionText(r), files, byteText(bytes), attempts, rows, len(r.Branches), left)
	}
	return problems
}

func retentionText(r prune.Report) string {
	k := r.Retention
	if k.Runs <= 0 && k.Days <= 0 {
		return "retention keeps every run"
	}
	return fmt.Sprintf("retention: runs %d, days %d", k.Runs, k.Days)
}

// byteText is n bytes in a unit a person reads.
func byteText(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/readmodel"
	"github.com/dispatch-tool/dispatch/store"
)

func runsCommand() *cli.Command {
	return readCommand(&cli.Command{
		Name:  "runs",
		Usage: "list a project's runs: result, times, tasks run and reused, cost",
		Flags: []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "print JSON"}},
	}, "dispatch runs <project>", func(c *cli.Context, e *env, st *store.Store, project string) error {
		v, err := readmodel.Runs(c.Context, st, project)
		if err != nil {
			return err
		}
		v.Controller = controllerOf(e.home)
		if c.Bool("json") {
			return printJSON(e.out, v)
		}
		tw := tabwriter.NewWriter(e.out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "RUN\tRESULT\tBY\tSTARTED\tFINISHED\tRAN\tREUSED\tCOST")
		var stale string
		for _, r := range v.Runs {
			result := r.Result
			if r.Result == domain.ResultRunning && v.Controller.Stale() {
				result, stale = "running (no controller)", v.Controller.Line(project, time.Now())
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%d\t$%.4f\n", r.Run, result, r.Trigger, localTime(r.StartedAt), localTime(r.FinishedAt),
				r.TasksRan, r.TasksReused, r.CostUSD)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if stale != "" {
			fmt.Fprintln(e.out, e.styles.warn.Render(stale))
		}
		return nil
	})
}

// localTime shows an RFC 3339 time of the JSON views in local time, to the
// second; "-" for none.
func localTime(s string) string {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05")
}

// printJSON prints v as indented JSON (the --json of runs and schedule).
func printJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(w, string(b))
	return err
}

package main

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/internal/termtext"
	"github.com/dispatch-tool/dispatch/readmodel"
	"github.com/dispatch-tool/dispatch/store"
)

func eventsCommand() *cli.Command {
	return readCommand(&cli.Command{
		Name:  "events",
		Usage: "print a project's event log: every state change of every task, node and phase",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "follow", Aliases: []string{"f"}, Usage: "keep printing new events until the project finishes"},
			&cli.BoolFlag{Name: "json", Usage: "one JSON object per line"},
			&cli.Int64Flag{Name: "after", Usage: "only the events after event `ID` (the id of --json: a cursor)"},
			runFlag(),
		},
	}, "dispatch events <project> [-f] [--json] [--after ID]", func(c *cli.Context, e *env, st *store.Store, project string) error {
		ctx := c.Context
		last := c.Int64("after")
		if last < 0 {
			return usagef("dispatch events "+project+" --json --after 0", "--after takes an event id, 0 or more, not %d", last)
		}
		at, err := atRun(c, st, project, "dispatch events "+project+" --run 1")
		if err != nil {
			return err
		}
		// An ended run has no more events to follow.
		follow := c.Bool("follow") && at == st
		st = at
		enc := json.NewEncoder(e.out)
		for {
			evs, err := st.Events(ctx, project, last, 0)
			if err != nil {
				return err
			}
			for _, ev := range evs {
				last = ev.ID
				if c.Bool("json") {
					if err := enc.Encode(readmodel.Event(ev)); err != nil {
						return err
					}
					continue
				}
				fmt.Fprintln(e.out, eventText(ev))
			}
			if !follow {
				return nil
			}
			p, err := st.Project(ctx, project)
			if err != nil {
				return err
			}
			if p.State != domain.ProjectActive && len(evs) == 0 {
				return nil
			}
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(500 * time.Millisecond):
			}
		}
	})
}

func eventText(ev store.Event) string {
	what := ev.Kind
	if ev.FromStatus != "" || ev.ToStatus != "" {
		what += " " + ev.FromStatus + "→" + ev.ToStatus
	}
	who := ev.Task
	if ev.Attempt > 0 {
		who = fmt.Sprintf("%s#%d", ev.Task, ev.Attempt)
	}
	if who == "" {
		who = "-"
	}
	line := fmt.Sprintf("%s  %-7s %s", ev.Time.Local().Format("2006-01-02 15:04:05"), who, what)
	if ev.Node != "" {
		line += " [" + ev.Node + "]"
	}
	if ev.Message != "" {
		line += "  " + ev.Message
	}
	return termtext.Clean(line)
}

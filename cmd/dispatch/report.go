package main

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/dispatch-tool/dispatch/readmodel"
)

func reportCommand() *cli.Command {
	return projectCommand(&cli.Command{
		Name:  "report",
		Usage: "print a project's report (what ran, what failed and why, outputs, tokens)",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "format", Value: "md", Usage: "md or json"},
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "write to `FILE` instead of stdout"},
			runFlag(),
		},
	}, "dispatch report <project>", func(c *cli.Context, e *env, name string) error {
		ctx := c.Context
		format := c.String("format")
		if format != "md" && format != "json" {
			return usagef("dispatch report "+name+" --format json", "unknown format %q: use md or json", format)
		}
		st, err := e.openProject(ctx, name)
		if err != nil {
			return err
		}
		defer st.Close()
		at, err := atRun(c, st, name, "dispatch report "+name+" --run 1")
		if err != nil {
			return err
		}
		cfg, err := e.loadConfig()
		if err != nil {
			cfg = nil
		}
		r, err := readmodel.BuildReport(ctx, at, cfg, e.home, name, time.Now())
		if err != nil {
			return err
		}
		if at == st {
			r.Controller = controllerOf(e.home)
		}
		var out []byte
		if format == "json" {
			out, err = json.MarshalIndent(r, "", "  ")
			if err != nil {
				return err
			}
			out = append(out, '\n')
		} else {
			out = []byte(r.Markdown())
		}
		if path := c.String("output"); path != "" {
			if err := writePrivate(path, out); err != nil {
				return fmt.Errorf("write report: %w", err)
			}
			return nil
		}
		_, err = e.out.Write(out)
		return err
	})
}

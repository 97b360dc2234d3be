package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v2"

	"github.com/dispatch-tool/dispatch/control"
	"github.com/dispatch-tool/dispatch/dashboard"
	"github.com/dispatch-tool/dispatch/home"
	"github.com/dispatch-tool/dispatch/httpapi"
)

// httpAddr is --http's value: a flag that may stand alone (the default
// address) or take one (--http=ADDR; --http ADDR is read as the argument
// after the flag).
type httpAddr struct {
	set  bool
	addr string
}

func (h *httpAddr) Set(v string) error {
	h.set = true
	if v != "true" {
		h.addr = v
	}
	return nil
}

func (h *httpAddr) String() string { return h.addr }

// IsBoolFlag lets --http stand without a value.
func (h *httpAddr) IsBoolFlag() bool { return true }

// httpListen reads serve's --http flags: nil without --http. An address
// may follow --http as serve's only argument.
func httpListen(c *cli.Context) (*httpapi.Listen, error) {
	const usage = "dispatch serve [--detach] [--http [ADDR] [--tls-cert FILE --tls-key FILE] [--read-only]]"
	h, _ := c.Generic("http").(*httpAddr)
	if h == nil || !h.set {
		if c.NArg() > 0 {
			return nil, usagef(usage, "serve takes no arguments, not %q", c.Args().First())
		}
		for _, f := range []string{"tls-cert", "tls-key", "insecure-listen", "read-only"} {
			if c.IsSet(f) {
				return nil, usagef(usage, "--%s only applies with --http", f)
			}
		}
		return nil, nil
	}
	addr := h.addr
	switch {
	case c.NArg() == 1 && addr == "":
		addr = c.Args().First()
	case c.NArg() > 0:
		return nil, usagef(usage, "serve takes one address after --http, not %q", c.Args().Slice())
	case addr == "":
		addr = httpapi.DefaultAddr
	}
	l := httpapi.Listen{Addr: addr, CertFile: absPath(c.String("tls-cert")), KeyFile: absPath(c.String("tls-key")), Insecure: c.Bool("insecure-listen"),
		ReadOnly: c.Bool("read-only")}
	if err := l.Check(); err != nil {
		return nil, &usageError{err: err, hint: usage}
	}
	return &l, nil
}

func absPath(p string) string {
	if p == "" {
		return ""
	}
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

// webArgs are the --http flags that give web again (a daemon's command
// line).
func webArgs(web *httpapi.Listen) []string {
	if web == nil {
		return nil
	}
	args := []string{"--http=" + web.Addr}
	if web.TLS() {
		args = append(args, "--tls-cert", web.CertFile, "--tls-key", web.KeyFile)
	}
	if web.Insecure {
		args = append(args, "--insecure-listen")
	}
	if web.ReadOnly {
		args = append(args, "--read-only")
	}
	return args
}

// serveHTTP starts the dashboard and API of e's home on web, says where
// they are, and returns what stops them. Their actions go to the home's
// running controller as the CLI's do (operate), unless web is read-only.
func serveHTTP(e *env, web httpapi.Listen) (stop func(), err error) {
	tok, err := home.Token(e.home)
	if err != nil {
		return nil, err
	}
	readTok, err := home.ReadToken(e.home)
	if err != nil {
		return nil, err
	}
	ln, err := web.Open()
	if err != nil {
		return nil, err
	}
	srv := &httpapi.Server{Home: e.home, Token: tok, ReadToken: readTok, Config: e.config, UI: dashboardUI(), Log: e.log, Secure: web.TLS(),
		Refresh: refreshViews, Act: func(ctx context.Context, req control.Request) (control.Reply, error) { return operate(ctx, e, req) }}
	if web.ReadOnly {
		srv.ReadOnly = "this server was started with dispatch serve --http --read-only (dispatch retry, cancel, stop, start and schedule act at the terminal)"
	}
	running := srv.Serve(ln)
	// The detached daemon's output is its log: no token there.
	if os.Getenv(detachedEnv) != "" {
		fmt.Fprintf(e.out, "dispatch serve: dashboard and API on %s (token: %s)\n", web.URL(ln.Addr().String(), ""), home.TokenPath(e.home))
	} else if err := printWebURL(e, web, ln.Addr().String()); err != nil {
		running.Stop()
		srv.Close()
		return nil, err
	}
	return func() {
		running.Stop()
		srv.Close()
	}, nil
}

// printWebURL says where the dashboard is, with its token: once, to the
// operator (a detached daemon's parent prints it for its child). Only on
// a terminal: an output that is not one (a service manager's journal or
// log file, a redirect) is kept where others may read it, and gets the
// address without the token.
func printWebURL(e *env, web httpapi.Listen, bound string) error {
	tok, err := home.Token(e.home)
	if err != nil {
		return err
	}
	link := web.URL(bound, tok)
	if !e.tty {
		link = web.URL(bound, "") + "?token=<the token in " + home.TokenPath(e.home) + ">"
	}
	fmt.Fprintf(e.out, "dashboard: %s\nAPI: %sapi/v1 (Authorization: Bearer <the token in %s>)\n",
		link, web.URL(bound, ""), home.TokenPath(e.home))
	return nil
}

// dashboardUI is the dashboard the API serves at /.
func dashboardUI() http.Handler { return dashboard.Handler() }

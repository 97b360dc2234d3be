package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/xml"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/dispatch-tool/dispatch/home"
	"github.com/dispatch-tool/dispatch/httpapi"
	"github.com/dispatch-tool/dispatch/nodes"
)

// serviceFile is what `dispatch serve --install` writes: a systemd user
// unit (Linux) or a launchd agent (macOS) that runs `dispatch serve` for
// one home, and the commands that enable it.
type serviceFile struct {
	Path, Text string
	Enable     []string
}

// serviceFor builds the service file for goos. argv is the daemon's
// command line; userHome the user's home; configHome $XDG_CONFIG_HOME.
func serviceFor(goos, homeDir string, argv []string, userHome, configHome string) (serviceFile, error) {
	sum := sha256.Sum256([]byte(homeDir))
	id := hex.EncodeToString(sum[:4])
	switch goos {
	case "linux":
		if configHome == "" {
			configHome = filepath.Join(userHome, ".config")
		}
		name := "dispatch-serve-" + id + ".service"
		var quoted []string
		for _, a := range argv {
			quoted = append(quoted, systemdQuote(a))
		}
		text := fmt.Sprintf(`# Written by dispatch serve --install: the dispatch daemon of %s.
[Unit]
Description=dispatch serve for %s
After=network-online.target

[Service]
Type=simple
ExecStart=%s
Restart=on-failure
RestartSec=10
# Stopping the daemon leaves the tasks it started running (as Ctrl-C does);
# the next controller collects them.
KillMode=process

[Install]
WantedBy=default.target
`, systemdText(homeDir), systemdText(homeDir), strings.Join(quoted, " "))
		return serviceFile{Path: filepath.Join(configHome, "systemd", "user", name), Text: text,
			Enable: []string{"systemctl --user daemon-reload", "systemctl --user enable --now " + name}}, nil
	case "darwin":
		label := "dev.dispatch.serve." + id
		var b strings.Builder
		for _, a := range argv {
			b.WriteString("\t\t<string>")
			_ = xml.EscapeText(&b, []byte(a))
			b.WriteString("</string>\n")
		}
		logPath := home.LogPath(homeDir)
		var esc strings.Builder
		_ = xml.EscapeText(&esc, []byte(logPath))
		text := fmt.Sprintf(`<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<plist version="1.0">
<dict>
	<key>Label</key>
	<string>%s</string>
	<key>ProgramArguments</key>
	<array>
%s	</array>
	<key>RunAtLoad</key>
	<true/>
	<key>KeepAlive</key>
	<dict>
		<key>SuccessfulExit</key>
		<false/>
	</dict>
	<key>StandardOutPath</key>
	<string>%s</string>
	<key>StandardErrorPath</key>
	<string>%s</string>
</dict>
</plist>
`, label, b.String(), esc.String(), esc.String())
		path := filepath.Join(userHome, "Library", "LaunchAgents", label+".plist")
		return serviceFile{Path: path, Text: text, Enable: []string{"launchctl load -w " + shellQuote(path)}}, nil
	}
	return serviceFile{}, fmt.Errorf("dispatch serve --install knows systemd (Linux) and launchd (macOS), not %s: "+
		"run `dispatch serve --detach` from your system's service manager instead", goos)
}

// systemdQuote quotes one ExecStart argument: in double quotes, with \ and
// " escaped, and % and $ doubled so that systemd expands nothing in it.
func systemdQuote(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "%", "%%", "$", "$$", "\n", `\n`)
	return `"` + r.Replace(s) + `"`
}

// systemdText is s for a unit's free text (Description, comments).
func systemdText(s string) string {
	return strings.NewReplacer("%", "%%", "\n", " ", `\`, "/").Replace(s)
}

func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

var varRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// configVars are the ${VAR}s nodes.yaml takes from the controller's
// environment (api_mode env, notify), sorted.
func configVars(cfg *nodes.Config) []string {
	seen := map[string]bool{}
	add := func(s string) {
		for _, m := range varRef.FindAllStringSubmatch(s, -1) {
			seen[m[1]] = true
		}
	}
	for _, m := range cfg.APIModes {
		for _, v := range m.Env {
			add(v)
		}
	}
	if cfg.Notify != nil {
		add(cfg.Notify.Webhook)
		add(cfg.Notify.Secret)
	}
	out := make([]string, 0, len(seen))
	for v := range seen {
		out = append(out, v)
	}
	slices.Sort(out)
	return out
}

func serveInstall(c *cli.Context, e *env, web *httpapi.Listen) error {
	cfg, err := e.loadConfig()
	if err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	if real, err := filepath.EvalSymlinks(exe); err == nil {
		exe = real
	}
	userHome, err := os.UserHomeDir()
	if err != nil {
		return err
	}
	argv := append([]string{exe}, serveArgs(c, e, web)...)
	sf, err := serviceFor(runtime.GOOS, e.home, argv, userHome, os.Getenv("XDG_CONFIG_HOME"))
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(sf.Path), 0o700); err != nil {
		return err
	}
	if err := writePrivate(sf.Path, []byte(sf.Text)); err != nil {
		return err
	}
	fmt.Fprintf(e.out, "wrote %s\nenable it with:\n", sf.Path)
	for _, cmd := range sf.Enable {
		fmt.Fprintf(e.out, "  %s\n", cmd)
	}
	if runtime.GOOS == "linux" {
		fmt.Fprintln(e.out, "to keep it running while you are logged out: loginctl enable-linger \"$USER\"")
	}
	if vars := configVars(cfg); len(vars) > 0 {
		fmt.Fprintf(e.out, "the service does not see your shell's environment: give it %s before enabling it", strings.Join(vars, ", "))
		if runtime.GOOS == "linux" {
			fmt.Fprintf(e.out, ", e.g. `systemctl --user import-environment %s` from a shell that has them "+
				"(kept in the user manager's memory, never on disk)\n", strings.Join(vars, " "))
		} else {
			fmt.Fprintf(e.out, ", e.g. `launchctl setenv NAME VALUE` for each (kept in launchd's memory, never on disk)\n")
		}
	}
	return nil
}

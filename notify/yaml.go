package notify

import (
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/dispatch-tool/dispatch/internal/yamlval"
)

// Keys are the keys of a notify block.
var Keys = []string{"webhook", "secret", "command", "on"}

// FromYAML reads the notify block v (of project.yaml or nodes.yaml) into a
// checked Config, reporting each problem at its line in d; nil when there
// was one.
func FromYAML(d yamlval.Doc, v *yaml.Node) *Config {
	v = yamlval.Resolve(v)
	if v.Kind != yaml.MappingNode {
		d.Errorf(v, "write notify: {webhook: https://…, secret: ${VAR}, command: [prog, arg]} (webhook, command or both)",
			"notify must be a mapping, not %s", yamlval.Describe(v))
		return nil
	}
	before := len(*d.Problems)
	var c Config
	at := map[string]*yaml.Node{"notify": v}
	pairs, _ := d.Mapping(v, "notify")
	for _, kv := range pairs {
		k, val := kv.Key, kv.Val
		at[k.Value] = val
		switch k.Value {
		case "webhook":
			c.Webhook, _ = d.String(val, "notify", "webhook")
		case "secret":
			c.Secret, _ = d.String(val, "notify", "secret")
		case "command":
			if val.Kind != yaml.SequenceNode {
				d.Errorf(val, "write command: [my-notifier, --flag] (a list: no shell reads it)", "notify: command must be a list, not %s", yamlval.Describe(val))
				continue
			}
			for _, a := range val.Content {
				if s, ok := d.Scalar(a, "notify", "command"); ok {
					c.Command = append(c.Command, s)
				}
			}
		case "on":
			c.On = onFromYAML(d, val)
		default:
			d.Unknown(k, "notify: ", Keys)
		}
	}
	if len(*d.Problems) > before {
		return nil
	}
	for _, p := range c.Check() {
		d.Errorf(at[p.Field], p.Fix, "notify: %s", p.Msg)
	}
	if len(*d.Problems) > before {
		return nil
	}
	return &c
}

// onFromYAML reads `on: [event, …]`, each unknown event at its line.
func onFromYAML(d yamlval.Doc, v *yaml.Node) []string {
	v = yamlval.Resolve(v)
	known := "known events: " + strings.Join(Events, ", ")
	if v.Kind != yaml.SequenceNode {
		d.Errorf(v, "write on: [task_failed, run_failed] ("+known+")", "notify: on must be a list of events, not %s", yamlval.Describe(v))
		return nil
	}
	if len(v.Content) == 0 {
		d.Errorf(v, "leave on: out to send every event, or list some: "+known, "notify: on is an empty list")
		return nil
	}
	var out []string
	for _, n := range v.Content {
		e, ok := d.Scalar(n, "notify", "on")
		if !ok {
			continue
		}
		if !slices.Contains(Events, e) {
			fix := known
			if s := yamlval.Suggest(e, Events); s != "" {
				fix = "did you mean " + strconv.Quote(s) + "? " + known
			}
			d.Errorf(n, fix, "notify: on: unknown event %q", e)
			continue
		}
		out = append(out, e)
	}
	return out
}

package yamlval

import (
	"fmt"
	"math"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/dispatch-tool/dispatch/internal/netallow"
)

// The readers below decode one value. Each follows aliases, reports a
// problem at the value's line and returns false when the value is not one
// of its kind; null (a key written without a value) is not a value: callers
// skip keys left empty before reading them. where names the section in
// messages ("controller", `node "a"`; "" for none) and key the value
// ("slots", or a path such as "budget.tokens").

// MaxInt is the hi of Int for a number with no upper bound.
const MaxInt = math.MaxInt

// String reads text: a plain or quoted string. A number, a bool or a list
// is refused, so `title: 2024` is asked to be quoted rather than guessed.
func (d Doc) String(v *yaml.Node, where, key string) (string, bool) {
	v = Resolve(v)
	if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!str" {
		d.Errorf(v, "put the value in quotes if it is meant as text", "%s%s must be a string, not %s", prefix(where), key, Describe(v))
		return "", false
	}
	return v.Value, true
}

// Scalar reads any single value as it is written, a number (an argument
// such as 50, a node named 1) or a bool included.
func (d Doc) Scalar(v *yaml.Node, where, key string) (string, bool) {
	v = Resolve(v)
	if v.Kind != yaml.ScalarNode || IsNull(v) {
		d.Errorf(v, fmt.Sprintf("write %s as a single value", key), "%s%s must be a string, not %s", prefix(where), key, Describe(v))
		return "", false
	}
	return v.Value, true
}

// Int reads a whole number from lo to hi (MaxInt for no upper bound).
func (d Doc) Int(v *yaml.Node, where, key string, lo, hi int) (int, bool) {
	v = Resolve(v)
	rng := fmt.Sprintf("a whole number from %d to %d", lo, hi)
	if hi == MaxInt {
		rng = fmt.Sprintf("a whole number, at least %d", lo)
	}
	var n int
	if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!int" || v.Decode(&n) != nil {
		d.Errorf(v, fmt.Sprintf("write %s, without quotes, e.g. %s: %d", rng, lastPart(key), min(max(lo, 2), hi)),
			"%s%s must be %s, not %s", prefix(where), key, rng, Describe(v))
		return 0, false
	}
	switch {
	case n >= lo && n <= hi:
		return n, true
	case hi == MaxInt:
		d.Errorf(v, fmt.Sprintf("set %s to %d or more", lastPart(key), lo), "%s%s must be at least %d, not %d", prefix(where), key, lo, n)
	default:
		d.Errorf(v, "write "+rng, "%s%s must be %s, not %d", prefix(where), key, rng, n)
	}
	return 0, false
}

// Number reads a positive number, whole or with decimals.
func (d Doc) Number(v *yaml.Node, where, key string) (float64, bool) {
	v = Resolve(v)
	const fix = "write a positive number without quotes, e.g. 20 or 12.5"
	var f float64
	if v.Kind != yaml.ScalarNode || (v.ShortTag() != "!!int" && v.ShortTag() != "!!float") || v.Decode(&f) != nil {
		d.Errorf(v, fix, "%s%s must be a number, not %s", prefix(where), key, Describe(v))
		return 0, false
	}
	if !(f > 0) || math.IsInf(f, 0) {
		d.Errorf(v, fix, "%s%s must be positive, not %s", prefix(where), key, v.Value)
		return 0, false
	}
	return f, true
}

// Bool reads true or false. YAML 1.1's yes/no, on/off and y/n are taken
// too when written without quotes: whoever writes `dangerous: yes` means
// true, whoever writes "yes" means the word.
func (d Doc) Bool(v *yaml.Node, where, key string) (bool, bool) {
	v = Resolve(v)
	var b bool
	// Decode, not the tag: yaml.v3 reads yes/no as strings, but decodes
	// them (quoted ones too) into a bool.
	const text = yaml.SingleQuotedStyle | yaml.DoubleQuotedStyle | yaml.LiteralStyle | yaml.FoldedStyle
	if v.Kind != yaml.ScalarNode || IsNull(v) || v.Style&text != 0 || v.Decode(&b) != nil {
		d.Errorf(v, fmt.Sprintf("write %s: true or %s: false", lastPart(key), lastPart(key)), "%s%s must be true or false, not %s", prefix(where), key, Describe(v))
		return false, false
	}
	return b, true
}

const durationFix = "write a positive duration with a unit, e.g. 45s, 30m or 1h30m"

// Duration reads a positive duration with a unit, such as 45s or 1h30m;
// space around it is ignored.
func (d Doc) Duration(v *yaml.Node, where, key string) (time.Duration, bool) {
	v = Resolve(v)
	if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!str" {
		fix := durationFix
		if v.ShortTag() == "!!int" {
			fix = fmt.Sprintf("add a unit, e.g. %s: %ss", lastPart(key), v.Value)
		}
		d.Errorf(v, fix, "%s%s must be a duration, not %s", prefix(where), key, Describe(v))
		return 0, false
	}
	dur, bad := parseDuration(prefix(where)+key, v.Value)
	if bad != "" {
		d.Errorf(v, durationFix, "%s", bad)
		return 0, false
	}
	return dur, true
}

// parseDuration reads the positive duration s given for key; otherwise the
// message says what is wrong.
func parseDuration(key, s string) (time.Duration, string) {
	d, err := time.ParseDuration(strings.TrimSpace(s))
	switch {
	case err != nil:
		return 0, fmt.Sprintf("%s: %q is not a duration", key, s)
	case d <= 0:
		return 0, fmt.Sprintf("%s must be positive, not %s", key, s)
	}
	return d, ""
}

// Size reads a byte count (see parseSize), zero included.
func (d Doc) Size(v *yaml.Node, where, key string) (int64, bool) {
	v = Resolve(v)
	const fix = "write bytes or a size with a unit, e.g. 512MiB, 2GiB or 1.5GB (KB/MB/GB/TB are powers of 1000, KiB/MiB/GiB/TiB of 1024)"
	if v.Kind != yaml.ScalarNode || (v.ShortTag() != "!!str" && v.ShortTag() != "!!int" && v.ShortTag() != "!!float") {
		d.Errorf(v, fix, "%s%s must be a size, not %s", prefix(where), key, Describe(v))
		return 0, false
	}
	n, err := parseSize(v.Value)
	if err != nil {
		d.Errorf(v, fix, "%s%s: %v", prefix(where), key, err)
		return 0, false
	}
	return n, true
}

// lastPart is the key to write in an example: "tokens" for the
// "budget.tokens" of a message.
func lastPart(key string) string {
	return key[strings.LastIndexByte(key, '.')+1:]
}

func prefix(where string) string {
	if where == "" {
		return ""
	}
	return where + ": "
}

// Sandbox reads a sandbox setting: on, off or auto; true and false (and
// YAML 1.1's yes/no) mean on and off. It returns "on", "off" or "auto".
func (d Doc) Sandbox(v *yaml.Node, where, key string) (string, bool) {
	v = Resolve(v)
	if v.Kind == yaml.ScalarNode {
		switch strings.ToLower(strings.TrimSpace(v.Value)) {
		case "on", "true", "yes":
			return "on", true
		case "off", "false", "no":
			return "off", true
		case "auto":
			return "auto", true
		}
	}
	d.Errorf(v, fmt.Sprintf("write %s: on (refuse to run without it), off or auto (where the node has it)", lastPart(key)),
		"%s%s must be on, off or auto, not %s", prefix(where), key, Describe(v))
	return "", false
}

// Values of a network setting (issue 20), in nodes.yaml, project.yaml
// and a spec's front matter.
const (
	// NetworkOpen: the node's network (the default).
	NetworkOpen = "open"
	// NetworkNone: no network but a loopback of the task's own; it needs
	// the sandbox.
	NetworkNone = "none"
)

// Network reads a network setting: open, none, or {allow: ["host:port",
// ...]}, which it returns encoded by netallow.Encode ("allow:" and the
// entries). An empty list allows only what the task's tool needs.
func (d Doc) Network(v *yaml.Node, where, key string) (string, bool) {
	v = Resolve(v)
	const fix = "write network: open (the node's network), network: none (no network but the task's own loopback) or network: {allow: [\"host:port\", ...]} (only those; both need the sandbox)"
	if v.Kind == yaml.ScalarNode && v.ShortTag() == "!!str" {
		switch strings.ToLower(strings.TrimSpace(v.Value)) {
		case NetworkOpen:
			return NetworkOpen, true
		case NetworkNone:
			return NetworkNone, true
		}
	}
	if v.Kind != yaml.MappingNode || len(v.Content) != 2 || Resolve(v.Content[0]).Value != "allow" {
		d.Errorf(v, fix, "%s%s must be open, none or {allow: [...]}, not %s", prefix(where), key, Describe(v))
		return "", false
	}
	list := Resolve(v.Content[1])
	if list.Kind != yaml.SequenceNode {
		d.Errorf(list, `write allow: ["api.example.com:443", "127.0.0.1:8080"] (an empty list allows only the tool's API)`,
			"%s%s.allow must be a list of host:port, not %s", prefix(where), key, Describe(list))
		return "", false
	}
	var l netallow.List
	ok := true
	for _, item := range list.Content {
		s, sok := d.String(item, where, key+".allow")
		if !sok {
			ok = false
			continue
		}
		e, err := netallow.Parse(s)
		if err != nil {
			d.Errorf(item, "write each entry as host:port", "%s%s.allow: %v", prefix(where), key, err)
			ok = false
			continue
		}
		l = append(l, e)
	}
	if !ok {
		return "", false
	}
	return netallow.Encode(l), true
}

// NetworkConfined reports whether a network setting takes the node's
// network away (none, an allow list): the task then needs the sandbox.
func NetworkConfined(s string) bool {
	return s == NetworkNone || netallow.IsAllow(s)
}

// NetworkWord names a network setting in a message: open, none, or
// {allow: [...]} for an allow list.
func NetworkWord(s string) string {
	if netallow.IsAllow(s) {
		return "{allow: [...]}"
	}
	return s
}

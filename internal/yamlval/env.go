package yamlval

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// EnvNameRE matches an environment variable's name.
var EnvNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// ExpandEnv replaces every ${NAME} in s with lookup(NAME); "$$" stands for a
// literal "$". Any other "$" is a syntax error, so that a value meant as a
// variable is never passed on verbatim. Every variable lookup reports missing is
// named in the error. A variable that is set but empty expands to "": wrap
// lookup to refuse those too.
func ExpandEnv(s string, lookup func(string) (string, bool)) (string, error) {
	var b strings.Builder
	var missing []string
	for i := 0; i < len(s); {
		j := strings.IndexByte(s[i:], '$')
		if j < 0 {
			b.WriteString(s[i:])
			break
		}
		b.WriteString(s[i : i+j])
		i += j
		rest := s[i+1:]
		switch {
		case strings.HasPrefix(rest, "$"):
			b.WriteByte('$')
			i += 2
		case strings.HasPrefix(rest, "{"):
			end := strings.IndexByte(rest, '}')
			if end < 0 {
				return "", fmt.Errorf("${ at offset %d is not closed by }", i)
			}
			name := rest[1:end]
			if !EnvNameRE.MatchString(name) {
				return "", fmt.Errorf("${%s} at offset %d is not a valid variable reference", name, i)
			}
			if v, ok := lookup(name); ok {
				b.WriteString(v)
			} else if !slices.Contains(missing, name) {
				missing = append(missing, name)
			}
			i += 1 + end + 1
		default:
			return "", fmt.Errorf("$ at offset %d must start ${NAME} or be doubled as $$", i)
		}
	}
	switch len(missing) {
	case 0:
		return b.String(), nil
	case 1:
		return "", fmt.Errorf("environment variable %s is not set", missing[0])
	default:
		return "", fmt.Errorf("environment variables %s are not set", strings.Join(missing, ", "))
	}
}

// Env reads an env: mapping of variable names to plain values, each of
// which may hold ${VAR} (taken from the controller's environment when the
// task starts) and $$ for a literal $. DISPATCH_* names are refused: dispatch
// sets those for every task. Each problem is reported at its line.
func (d Doc) Env(v *yaml.Node, where string) map[string]string {
	pairs, ok := d.Mapping(v, where)
	if !ok {
		return nil
	}
	out := map[string]string{}
	for _, kv := range pairs {
		name := kv.Key.Value
		switch {
		case !EnvNameRE.MatchString(name):
			d.Errorf(kv.Key, "use letters, digits and '_', not starting with a digit",
				"%s: %q is not a valid environment variable name", where, name)
			continue
		case strings.HasPrefix(name, "DISPATCH_"):
			d.Errorf(kv.Key, "rename it: DISPATCH_* variables are set by dispatch for every task",
				"%s: %s would be overwritten by dispatch", where, name)
			continue
		}
		val := kv.Val
		if IsNull(val) || val.Kind != yaml.ScalarNode {
			d.Errorf(val, `write the value as one string, e.g. "1", or ${VAR} to take it from the controller's environment`,
				"%s: %s must be a plain value, not %s", where, name, Describe(val))
			continue
		}
		if _, err := ExpandEnv(val.Value, func(string) (string, bool) { return "", true }); err != nil {
			d.Errorf(val, "write ${NAME} to use a variable of the controller's environment and $$ for a literal $",
				"%s: %s: %v", where, name, err)
			continue
		}
		out[name] = val.Value
	}
	return out
}

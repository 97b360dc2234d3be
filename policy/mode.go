package policy

import (
	"fmt"
	"slices"

	"github.com/dispatch-tool/dispatch/nodes"
)

// ModeProblem says why a node's api_mode cannot be used with this
// controller's environment (a ${VAR} that is not set), or "".
func ModeProblem(cfg *nodes.Config, n nodes.Node, lookup func(string) (string, bool)) string {
	mode, ok := cfg.APIModes[n.APIMode]
	if !ok {
		return ""
	}
	for _, k := range sortedKeys(mode.Env) {
		if _, err := nodes.ExpandEnv(mode.Env[k], lookup); err != nil {
			return fmt.Sprintf("api_mode %s: %s: %v (export it in the controller's environment)", n.APIMode, k, err)
		}
	}
	return ""
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

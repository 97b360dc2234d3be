package policy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/dispatch-tool/dispatch/nodes"
	"github.com/dispatch-tool/dispatch/wire"
)

// ReplyError describes a failed wrapper call from its JSON error reply, or
// from what it printed when the reply is not JSON.
func ReplyError(res nodes.Result, parseErr error) string {
	var e wire.ErrorReply
	if json.Unmarshal(res.Stdout, &e) == nil && e.Error != "" {
		return e.Error
	}
	msg := strings.TrimSpace(string(bytes.TrimSpace(res.Stderr)))
	if msg == "" {
		msg = strings.TrimSpace(string(res.Stdout))
	}
	if msg == "" && parseErr != nil {
		msg = parseErr.Error()
	}
	if len(msg) > 300 {
		msg = msg[:300] + "…"
	}
	return fmt.Sprintf("exit %d: %s", res.ExitCode, msg)
}

package agentlog

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
)

const (
	// UsageTail bounds how much of the end of task.log is read for usage.
	UsageTail = 4 << 20
	// maxObjectTries bounds the attempts to decode a pretty-printed JSON
	// object (gemini's) from a line holding a lone "{": each may read to
	// the end of the tail.
	maxObjectTries = 4
)

// tokensUsedRE is codex's plain summary line: "tokens used: 12,345", or
// "[2025-01-01T00:00:00] tokens used: 1234" in older versions; newer ones
// print "tokens used" alone and the number on the next line.
var tokensUsedRE = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`(?i)^(?:\[[^\]]*\]\s*)?tokens used:?\s*([0-9][0-9,_']*)?$`)
})

// ansiRE matches terminal colour and style sequences.
var ansiRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile("\x1b\\[[0-9;?]*[A-Za-z]") })

// ParseUsage reads the token and cost figures the agent CLI agent printed
// from the end of its log. Only that CLI's own final report counts: the
// output of any other tool (agent "") is the task's to write, and yields
// zeros, as do unknown shapes, never an error. Only the last 4 MiB of
// logTail are read, and a cut marker or a first line cut in the middle is
// skipped. Of several reports the last one counts. It understands:
//
//   - claude --output-format stream-json: the last {"type":"result"} event;
//     tokensIn is usage.input_tokens + cache_creation_input_tokens +
//     cache_read_input_tokens, tokensOut is usage.output_tokens, costUSD is
//     total_cost_usd (cost_usd in older CLIs).
//   - codex exec --json: the last JSON line with input_tokens and
//     output_tokens, at the top level, under "msg", under
//     "info"."total_token_usage" (token_count events) or under "usage"
//     (turn.completed events). Its input_tokens already include the cached
//     ones.
//   - codex exec, plain: "tokens used: 12,345" or "tokens used" over
//     "12,345". That number is the total of input and output and codex does
//     not say how it splits, so it goes into tokensOut with tokensIn 0: the
//     sum stays right and nothing is made up. A JSON report anywhere in the
//     tail is preferred to it.
//   - gemini --output-format json: the object with
//     "stats"."models"."<model>"."tokens"; tokensIn sums "prompt" and
//     tokensOut sums "candidates" over the models. The stream-json result
//     event's "stats" with input_tokens and output_tokens is read too.
//
// No tool but claude reports a cost, so costUSD is 0 for the others.
func ParseUsage(agent string, logTail []byte) (tokensIn, tokensOut int64, costUSD float64) {
	if !wire.IsAgent(agent) {
		return 0, 0, 0
	}
	text := logTail
	if len(text) > UsageTail {
		text = text[len(text)-UsageTail:]
		// The first line is most likely cut in the middle.
		if i := bytes.IndexByte(text, '\n'); i >= 0 {
			text = text[i+1:]
		}
	}
	if _, n := taskfiles.ParseCutMarker(text); n > 0 {
		text = text[n:]
	}

	textTotal := int64(-1)
	var next []byte // the line after the current one
	tries := 0
	for end := len(text); ; {
		start := bytes.LastIndexByte(text[:end], '\n') + 1
		raw := text[start:end]
		line := bytes.TrimSpace(raw)
		if len(line) > 0 && line[0] == '{' {
			if u, ok := jsonUsage(line); ok && u.from == agent {
				return u.in, u.out, u.cost
			}
			if bytes.Equal(bytes.TrimRight(raw, "\r"), []byte("{")) && tries < maxObjectTries {
				tries++
				if u, ok := objectUsage(text[start:]); ok && u.from == agent {
					return u.in, u.out, u.cost
				}
			}
		} else if agent == wire.AgentCodex && textTotal < 0 && (bytes.Contains(line, []byte("okens used")) || bytes.Contains(line, []byte("OKENS USED"))) {
			if n, ok := tokensUsed(line, next); ok {
				textTotal = n
			}
		}
		next = line
		if start == 0 {
			break
		}
		end = start - 1
	}
	if textTotal >= 0 {
		return 0, textTotal, 0
	}
	return 0, 0, 0
}

type usage struct {
	in, out int64
	cost    float64
	// from is the agent CLI whose report it is.
	from string
}

// jsonUsage reads usage from one line of JSON; lines that cannot hold any
// are not decoded at all, which keeps a long stream-json log cheap.
func jsonUsage(line []byte) (usage, bool) {
	if !bytes.Contains(line, []byte(`"input_tokens"`)) && !bytes.Contains(line, []byte(`"stats"`)) &&
		!bytes.Contains(line, []byte(`cost_usd"`)) {
		return usage{}, false
	}
	var obj map[string]any
	if err := json.Unmarshal(line, &obj); err != nil {
		return usage{}, false
	}
	return usageOf(obj)
}

// objectUsage decodes the JSON object that starts text (and may span many
// lines) and reads usage from it.
func objectUsage(text []byte) (usage, bool) {
	var obj map[string]any
	if err := json.NewDecoder(bytes.NewReader(text)).Decode(&obj); err != nil {
		return usage{}, false
	}
	return usageOf(obj)
}

// usageOf recognises the events and objects ParseUsage describes.
func usageOf(obj map[string]any) (usage, bool) {
	typ, _ := obj["type"].(string)
	if typ == "result" {
		if u, ok := object(obj, "usage"); ok {
			cost, ok := number(obj, "total_cost_usd")
			if !ok {
				cost, _ = number(obj, "cost_usd")
			}
			return usage{
				in:   count(u, "input_tokens") + count(u, "cache_creation_input_tokens") + count(u, "cache_read_input_tokens"),
				out:  count(u, "output_tokens"),
				cost: max(cost, 0),
				from: wire.AgentClaude,
			}, true
		}
		if s, ok := object(obj, "stats"); ok && hasTokens(s) {
			return usage{in: count(s, "input_tokens"), out: count(s, "output_tokens"), from: wire.AgentGemini}, true
		}
		if cost, ok := number(obj, "total_cost_usd"); ok {
			return usage{cost: max(cost, 0), from: wire.AgentClaude}, true
		}
		if cost, ok := number(obj, "cost_usd"); ok {
			return usage{cost: max(cost, 0), from: wire.AgentClaude}, true
		}
		return usage{}, false
	}
	if s, ok := object(obj, "stats"); ok {
		if models, ok := object(s, "models"); ok {
			u := usage{from: wire.AgentGemini}
			for _, m := range models {
				mm, _ := m.(map[string]any)
				if t, ok := object(mm, "tokens"); ok {
					u.in += count(t, "prompt")
					u.out += count(t, "candidates")
				}
			}
			return u, true
		}
	}
	ev := obj
	if msg, ok := object(obj, "msg"); ok {
		ev = msg
	}
	candidates := []map[string]any{ev}
	if info, ok := object(ev, "info"); ok {
		if t, ok := object(info, "total_token_usage"); ok {
			candidates = []map[string]any{t}
		}
	}
	if typ == "turn.completed" {
		if u, ok := object(ev, "usage"); ok {
			candidates = append(candidates, u)
		}
	}
	for _, c := range candidates {
		if hasTokens(c) {
			return usage{in: count(c, "input_tokens"), out: count(c, "output_tokens"), from: wire.AgentCodex}, true
		}
	}
	return usage{}, false
}

func hasTokens(m map[string]any) bool {
	_, in := number(m, "input_tokens")
	_, out := number(m, "output_tokens")
	return in && out
}

func object(m map[string]any, key string) (map[string]any, bool) {
	v, ok := m[key].(map[string]any)
	return v, ok
}

func number(m map[string]any, key string) (float64, bool) {
	v, ok := m[key].(float64)
	return v, ok
}

// count is a token count: negative, fractional or absurd values are
// clamped rather than trusted.
func count(m map[string]any, key string) int64 {
	v, _ := number(m, key)
	switch {
	case !(v > 0):
		return 0
	case v > math.MaxInt64/4:
		return math.MaxInt64 / 4
	}
	return int64(v)
}

// tokensUsed parses codex's summary from line, or from next when line is
// the bare heading.
func tokensUsed(line, next []byte) (int64, bool) {
	m := tokensUsedRE().FindSubmatch(ansiRE().ReplaceAll(line, nil))
	if m == nil {
		return 0, false
	}
	digits := m[1]
	if len(digits) == 0 {
		digits = bytes.TrimSpace(ansiRE().ReplaceAll(next, nil))
	}
	s := strings.NewReplacer(",", "", "_", "", "'", "").Replace(string(digits))
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, false
	}
	return n, true
}

// ReadLogTail reads up to the last limit bytes of the file at path.
func ReadLogTail(path string, limit int64) ([]byte, error) {
	// task.log sits where the task can replace it: a FIFO or a link must
	// not block or mislead the reader.
	f, err := taskfiles.OpenControlFile(path, os.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	off := max(fi.Size()-limit, 0)
	data, err := io.ReadAll(io.NewSectionReader(f, off, fi.Size()-off))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if off > 0 {
		// Cut in the middle of a line; ParseUsage must not see half a one.
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			data = data[i+1:]
		}
	}
	return data, nil
}

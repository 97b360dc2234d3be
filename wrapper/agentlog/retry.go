package agentlog

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dispatch-tool/dispatch/wire"
)

const (
	// retryTail bounds how much of the end of the log ParseRetryAfter reads.
	retryTail = 64 << 10
	// maxRetryAfter caps a reset time: a weekly limit is not worth more
	// than a day's pause, after which the next attempt tells again.
	maxRetryAfter = 24 * time.Hour
	// justReset is how far in the past a named reset time may be and still
	// count as a reset that has just happened (the tool printed it a moment
	// before it ended, or the node's clock runs a little fast) rather than
	// one that is a day away.
	justReset = 5 * time.Minute
)

// retryKeyRE finds the phrases that announce a reset; what follows each is
// parsed by the kind of its group. The expressions of this package are
// compiled on first use: most wrapper processes read no agent's log, and
// compiling them at start-up was a tenth of a millisecond of each.
var retryKeyRE = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`(?i)\b(?:` +
		`(retry[-_ ]?after[-_]ms|retry_?delay_?ms)|` + // 1: milliseconds (claude's api_retry "retry_delay_ms")
		`(retry[-_ ]?after)|` + // 2: seconds, a duration or an HTTP date
		`(retry_?delay)|` + // 3: google.rpc.RetryInfo, "retryDelay": "56s"
		`((?:try again|retry|resets?) in)|` + // 4: a duration
		`((?:try again|resets?)(?: at)?)|` + // 5: a time of day, a date, RFC 3339
		`(limit reached\s*\|)` + // 6: Claude's "usage limit reached|<unix time>"
		`)`)
})

// clockRE is a time of day after "resets" or "try again at", with an
// optional date before it and an IANA zone in brackets after it: "3pm",
// "3:30 am", "15:00", "Oct 9, 2pm", "Oct 5th, 2025 3:00 PM", "3pm (Europe/Paris)".
var clockRE = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`(?i)^\s*(?:at\s+)?` +
		`(?:(jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\.?\s+(\d{1,2})(?:st|nd|rd|th)?,?(?:\s+(\d{4}),?)?\s+(?:at\s+)?)?` +
		`(\d{1,2})(?::(\d{2}))?\s*(?:([ap])\.?m\b\.?)?` +
		`(?:\s*\(([A-Za-z0-9_+\-/]+)\))?`)
})

var months = map[string]time.Month{
	"jan": time.January, "feb": time.February, "mar": time.March, "apr": time.April,
	"may": time.May, "jun": time.June, "jul": time.July, "aug": time.August,
	"sep": time.September, "oct": time.October, "nov": time.November, "dec": time.December,
}

var spanUnits = map[string]time.Duration{
	"ms": time.Millisecond, "msec": time.Millisecond, "msecs": time.Millisecond,
	"millisecond": time.Millisecond, "milliseconds": time.Millisecond,
	"s": time.Second, "sec": time.Second, "secs": time.Second, "second": time.Second, "seconds": time.Second,
	"m": time.Minute, "min": time.Minute, "mins": time.Minute, "minute": time.Minute, "minutes": time.Minute,
	"h": time.Hour, "hr": time.Hour, "hrs": time.Hour, "hour": time.Hour, "hours": time.Hour,
	"d": 24 * time.Hour, "day": 24 * time.Hour, "days": 24 * time.Hour,
}

// ParseRetryAfter finds in the end of a rate-limited tool's log when the
// limit resets, and returns how long that is after now (the moment the tool
// ended, on the node's clock); 0 means the log does not say. Of several
// announcements the last one counts. It recognises
//
//   - "retry after 120s", "retry after 2 minutes", "Retry-After: 120" (bare
//     numbers are seconds), "retry-after-ms: 1500", and the HTTP-date form
//     "Retry-After: Wed, 21 Oct 2026 07:28:00 GMT";
//   - "try again in 2m30s", "retry in 35.5s", "resets in 1 hour 5 minutes",
//     and "retryDelay": "56s";
//   - Claude's "resets 3pm", "resets 3:30am", "resets at 15:00",
//     "resets Oct 9, 2pm", "try again at 3:00 PM", each optionally followed
//     by an IANA zone in brackets, "resets 3pm (Europe/Paris)";
//   - "usage limit reached|1767366245" (a Unix time) and RFC 3339 times
//     after "resets" or "try again at".
//
// A time of day means its next occurrence, in the named zone when it is
// one time.LoadLocation knows, else in now's location (the node's local
// zone, for the supervisor). A time that passed less than five minutes
// before now is a reset that has just happened: 1 s. The result is capped
// at 24 hours. Only the last 64 KiB of logTail are read.
func ParseRetryAfter(logTail []byte, now time.Time) time.Duration {
	if len(logTail) > retryTail {
		logTail = logTail[len(logTail)-retryTail:]
	}
	text := string(logTail)
	matches := retryKeyRE().FindAllStringSubmatchIndex(text, -1)
	for i := len(matches) - 1; i >= 0; i-- {
		m := matches[i]
		end := m[1]
		rest := text[end:min(end+120, len(text))]
		var d time.Duration
		var ok bool
		switch {
		case m[2] >= 0:
			d, ok = parseSpan(rest, time.Millisecond)
		case m[4] >= 0:
			if t, isDate := parseHTTPDate(rest); isDate {
				d, ok = Until(t, now), true
			} else {
				d, ok = parseSpan(rest, time.Second)
			}
		case m[6] >= 0:
			d, ok = parseSpan(rest, time.Second)
		case m[8] >= 0:
			d, ok = parseSpan(rest, 0)
		case m[10] >= 0:
			d, ok = parseClock(rest, now)
		case m[12] >= 0:
			d, ok = parseUnixTime(rest, now)
		}
		if ok && d > 0 {
			return min(d, maxRetryAfter)
		}
	}
	return 0
}

// Until is how long from now to t, for a reset time read from the log.
func Until(t, now time.Time) time.Duration {
	d := t.Sub(now)
	switch {
	case d > 0:
		return d
	case d > -justReset:
		return time.Second
	default:
		return 0
	}
}

// parseSpan reads a duration at the start of s: "120s", "2m30s", "1.5 s",
// "2 hours, 5 minutes", "1 day and 3 hours". A leading quote, colon or
// equals sign is skipped so that headers and JSON fields parse too. A
// number without a unit is worth bare, or is refused when bare is 0.
func parseSpan(s string, bare time.Duration) (time.Duration, bool) {
	s = strings.TrimLeft(s, " \t\"':=")
	var total time.Duration
	parts := 0
	for {
		num, rest, ok := leadingNumber(s)
		if !ok {
			break
		}
		word, after := leadingLetters(strings.TrimLeft(rest, " \t"))
		unit, known := spanUnits[strings.ToLower(word)]
		if !known {
			if parts == 0 && bare > 0 {
				return scale(num, bare), true
			}
			break
		}
		total += scale(num, unit)
		parts++
		s = strings.TrimLeft(after, " \t,")
		if w, a := leadingLetters(s); strings.EqualFold(w, "and") {
			s = strings.TrimLeft(a, " \t")
		}
	}
	return total, parts > 0
}

// scale multiplies without overflowing: anything beyond the cap is the cap.
func scale(num float64, unit time.Duration) time.Duration {
	v := num * float64(unit)
	if v > float64(2*maxRetryAfter) {
		return 2 * maxRetryAfter
	}
	return time.Duration(v)
}

// leadingNumber reads a decimal number ("12", "35.5") at the start of s.
func leadingNumber(s string) (float64, string, bool) {
	i := 0
	for i < len(s) && '0' <= s[i] && s[i] <= '9' {
		i++
	}
	if i == 0 {
		return 0, s, false
	}
	if i+1 < len(s) && s[i] == '.' && '0' <= s[i+1] && s[i+1] <= '9' {
		i++
		for i < len(s) && '0' <= s[i] && s[i] <= '9' {
			i++
		}
	}
	f, err := strconv.ParseFloat(s[:i], 64)
	if err != nil {
		return 0, s, false
	}
	return f, s[i:], true
}

func leadingLetters(s string) (string, string) {
	i := 0
	for i < len(s) && ('a' <= s[i] && s[i] <= 'z' || 'A' <= s[i] && s[i] <= 'Z') {
		i++
	}
	return s[:i], s[i:]
}

// parseHTTPDate reads an HTTP date (RFC 1123, GMT) at the start of s.
func parseHTTPDate(s string) (time.Time, bool) {
	s = strings.TrimLeft(s, " \t\"':=")
	i := strings.Index(s, "GMT")
	if i < 0 || i > 32 {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC1123, s[:i+3])
	return t, err == nil
}

// parseClock reads what follows "resets" or "try again at": an RFC 3339
// time, or a time of day with an optional date and zone (see clockRE).
func parseClock(s string, now time.Time) (time.Duration, bool) {
	field := strings.TrimLeft(s, " \t")
	field = strings.TrimPrefix(field, "at ")
	if i := strings.IndexAny(field, " \t\r\n\"',;)"); i >= 0 {
		field = field[:i]
	}
	field = strings.TrimRight(field, ".")
	if t, err := time.Parse(time.RFC3339, field); err == nil {
		return Until(t, now), true
	}

	m := clockRE().FindStringSubmatch(s)
	if m == nil {
		return 0, false
	}
	monthName, dayStr, yearStr, hourStr, minStr, ampm, zone := m[1], m[2], m[3], m[4], m[5], m[6], m[7]
	if ampm == "" && minStr == "" {
		// "resets 3" is no time of day.
		return 0, false
	}
	hour, _ := strconv.Atoi(hourStr)
	minute := 0
	if minStr != "" {
		minute, _ = strconv.Atoi(minStr)
	}
	switch {
	case minute > 59:
		return 0, false
	case ampm != "" && (hour < 1 || hour > 12):
		return 0, false
	case ampm == "" && hour > 23:
		return 0, false
	}
	if ampm != "" {
		hour %= 12
		if ampm == "p" || ampm == "P" {
			hour += 12
		}
	}
	loc := now.Location()
	if zone != "" {
		if l, err := time.LoadLocation(zone); err == nil {
			loc = l
		}
	}
	local := now.In(loc)
	if monthName != "" {
		day, _ := strconv.Atoi(dayStr)
		if day < 1 || day > 31 {
			return 0, false
		}
		month := months[strings.ToLower(monthName)]
		if yearStr != "" {
			year, _ := strconv.Atoi(yearStr)
			return Until(time.Date(year, month, day, hour, minute, 0, 0, loc), now), true
		}
		t := time.Date(local.Year(), month, day, hour, minute, 0, 0, loc)
		if now.Sub(t) >= justReset {
			t = t.AddDate(1, 0, 0)
		}
		return Until(t, now), true
	}
	t := time.Date(local.Year(), local.Month(), local.Day(), hour, minute, 0, 0, loc)
	if now.Sub(t) >= justReset {
		t = time.Date(local.Year(), local.Month(), local.Day()+1, hour, minute, 0, 0, loc)
	}
	return Until(t, now), true
}

// parseUnixTime reads the Unix time (seconds, or milliseconds when it is
// that large) Claude prints after "usage limit reached|".
func parseUnixTime(s string, now time.Time) (time.Duration, bool) {
	i := 0
	for i < len(s) && '0' <= s[i] && s[i] <= '9' {
		i++
	}
	if i < 9 || i > 13 {
		return 0, false
	}
	n, err := strconv.ParseInt(s[:i], 10, 64)
	if err != nil {
		return 0, false
	}
	t := time.Unix(n, 0)
	if i > 11 {
		t = time.UnixMilli(n)
	}
	return Until(t, now), true
}

// RetrySeconds is d for status.json, rounded to the millisecond.
func RetrySeconds(d time.Duration) float64 {
	return d.Round(time.Millisecond).Seconds()
}

// AgentReset finds when a rate limit resets in what the agent CLI agent
// printed before it ended rate-limited, as a wait from now; 0 means it does
// not say. Only the CLI's own structured reports count, the last one
// first: claude's result event (its text: "Claude AI usage limit
// reached|<unix time>", "resets 3pm") or its last api_retry of a 429,
// codex's error and turn.failed events, gemini's retry lines (see
// RetryNotice). A reset phrase anywhere else, and anything a tool that is
// no agent CLI prints (agent ""), names no reset: a task could pause a
// shared account for a day with one echo. Only the last 64 KiB are read.
func AgentReset(agent string, logTail []byte, now time.Time) time.Duration {
	if !wire.IsAgent(agent) {
		return 0
	}
	if len(logTail) > retryTail {
		logTail = logTail[len(logTail)-retryTail:]
	}
	for end := len(logTail); end > 0; {
		start := bytes.LastIndexByte(logTail[:end], '\n') + 1
		line := logTail[start:end]
		var prev []byte
		if start > 0 {
			ps := bytes.LastIndexByte(logTail[:start-1], '\n') + 1
			prev = logTail[ps : start-1]
		}
		if n, ok := RetryNotice(agent, prev, line, now); ok && n.Class == wire.ClassRateLimit && n.Wait > 0 {
			return min(n.Wait, maxRetryAfter)
		}
		if text, ok := finalReport(agent, line); ok {
			if d := ParseRetryAfter([]byte(text), now); d > 0 {
				return d
			}
		}
		end = start - 1
	}
	return 0
}

// finalReport is the text of the event with which claude (result) or codex
// (error, turn.failed) reports how it ended, when line is one.
func finalReport(agent string, line []byte) (string, bool) {
	line = bytes.TrimSpace(line)
	if len(line) == 0 || line[0] != '{' || !bytes.Contains(line, []byte(`"type"`)) {
		return "", false
	}
	var ev struct {
		Type    string          `json:"type"`
		Result  string          `json:"result"`
		Message string          `json:"message"`
		Error   json.RawMessage `json:"error"`
	}
	if json.Unmarshal(line, &ev) != nil {
		return "", false
	}
	switch {
	case agent == wire.AgentClaude && ev.Type == "result":
		return ev.Result, true
	case agent == wire.AgentCodex && ev.Type == "error":
		return ev.Message, true
	case agent == wire.AgentCodex && ev.Type == "turn.failed":
		var e struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(ev.Error, &e) != nil {
			return string(ev.Error), true
		}
		return e.Message, true
	}
	return "", false
}

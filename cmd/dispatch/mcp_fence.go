package main

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/dispatch-tool/dispatch/internal/textfence"
	"github.com/dispatch-tool/dispatch/spec"
)

// What a task prints (its log, its errors, the names of its files) reaches
// the agent that operates dispatch through the MCP answers. It is data,
// not instructions: every answer fences it between two marker lines and
// says so before, and the server's instructions say what the fence means
// (internal/textfence: an id drawn at random for each answer, the
// marker's name escaped inside the fenced text).

// fenceName is the marker's name (textfence.Name).
const fenceName = textfence.Name

// fence fences the task text of one answer; every fence of the answer has
// its id.
type fence struct{ id string }

// newFence draws a fence id: 64 random bits, which no task can guess.
func newFence() fence { return fence{id: textfence.NewID()} }

// wrap is text fenced, after what, which says what the text is: "S01's
// log". An empty text is not fenced.
func (f fence) wrap(what, text string) string { return textfence.Wrap(f.id, what, text) }

// cliCallRE finds a dispatch command line that a tool call can stand for.
var cliCallRE = regexp.MustCompile(`\bdispatch (validate|start|status|report|logs|events|retry|cancel|stop|runs)\b`)

// toolCalls rewrites the dispatch command lines naming project in text
// (the CLI's own words, passed on to the agent) into the tool calls that
// do the same: "dispatch retry p S01 reruns it" becomes `retry {project:
// "p", ids: ["S01"]} reruns it`. A command line a tool cannot express (a
// flag no tool has, another project) is left as it is.
func toolCalls(text, project string) string {
	var b strings.Builder
	for {
		m := cliCallRE.FindStringSubmatchIndex(text)
		if m == nil {
			b.WriteString(text)
			return b.String()
		}
		call, n := toolCall(text[m[2]:m[3]], text[m[1]:], project)
		if n < 0 {
			b.WriteString(text[:m[1]])
			text = text[m[1]:]
			continue
		}
		b.WriteString(text[:m[0]] + call)
		text = text[m[1]+n:]
	}
}

// toolCall reads the arguments of the command tool from rest (the text
// after "dispatch <tool>") and returns the tool call and how many bytes of
// rest it read; -1 when the tool cannot express them.
func toolCall(tool, rest, project string) (string, int) {
	args := []string{fmt.Sprintf("project: %q", project)}
	var ids []string
	read, seen := 0, false
	for {
		word, n := nextWord(rest[read:])
		if word == "" {
			break
		}
		switch {
		case strings.HasPrefix(word, "--"):
			arg, ok := toolFlags[word]
			if !ok {
				return "", -1
			}
			if arg != "" {
				args = append(args, arg)
			}
		case !seen && word == project:
			seen = true
		case seen && spec.TaskIDPattern.MatchString(word) && (tool == "retry" || tool == "cancel" || tool == "logs" && len(ids) == 0):
			ids = append(ids, word)
		default:
			n = 0
		}
		if n == 0 {
			break
		}
		read += n
	}
	if !seen {
		return "", -1
	}
	switch {
	case tool == "logs" && len(ids) == 1:
		args = append(args, fmt.Sprintf("id: %q", ids[0]))
	case len(ids) > 0:
		quoted := make([]string, len(ids))
		for i, id := range ids {
			quoted[i] = strconv.Quote(id)
		}
		args = append(args, "ids: ["+strings.Join(quoted, ", ")+"]")
	}
	return tool + " {" + strings.Join(args, ", ") + "}", read
}

// toolFlags are the CLI flags an answer may name, as tool arguments ("":
// a flag the tool has no need of).
var toolFlags = map[string]string{"--kill": "kill: true", "--fresh": "fresh: true", "--watch": "", "--json": "", "--detach": ""}

// nextWord is the word at the start of s after one space, without the
// punctuation that ends a clause, and the bytes it spans; "" when s does
// not go on with a word.
func nextWord(s string) (string, int) {
	if !strings.HasPrefix(s, " ") {
		return "", 0
	}
	end := 1
	for end < len(s) && !strings.ContainsRune(" \n\t;,)`'\"", rune(s[end])) {
		end++
	}
	word := strings.TrimRight(s[1:end], ".:")
	return word, 1 + len(word)
}

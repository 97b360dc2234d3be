package main

import (
	"fmt"

	"github.com/urfave/cli/v2"
)

// The bash and zsh scripts ask dispatch itself for the candidates (urfave/cli's
// --generate-bash-completion), so they follow the commands and flags of the
// installed version.
const bashCompletion = `# dispatch completion for bash: source <(dispatch completion bash)
_dispatch_complete() {
  local cur opts
  COMPREPLY=()
  cur="${COMP_WORDS[COMP_CWORD]}"
  if [[ "$cur" == "-"* ]]; then
    opts=$("${COMP_WORDS[@]:0:$COMP_CWORD}" "$cur" --generate-bash-completion 2>/dev/null)
  else
    opts=$("${COMP_WORDS[@]:0:$COMP_CWORD}" --generate-bash-completion 2>/dev/null)
  fi
  COMPREPLY=($(compgen -W "$opts" -- "$cur"))
  return 0
}
complete -o bashdefault -o default -F _dispatch_complete dispatch
`

const zshCompletion = `#compdef dispatch
# dispatch completion for zsh: source <(dispatch completion zsh)
_dispatch() {
  local -a opts
  local cur=${words[-1]}
  if [[ "$cur" == "-"* ]]; then
    opts=("${(@f)$(${words[@]:0:#words[@]-1} ${cur} --generate-bash-completion 2>/dev/null)}")
  else
    opts=("${(@f)$(${words[@]:0:#words[@]-1} --generate-bash-completion 2>/dev/null)}")
  fi
  if [[ "${opts[1]}" != "" ]]; then
    _describe 'values' opts
  else
    _files
  fi
}
compdef _dispatch dispatch
`

func completionCommand() *cli.Command {
	return &cli.Command{
		Name:      "completion",
		Usage:     "print a shell completion script: source <(dispatch completion bash|zsh); fish: dispatch completion fish | source",
		ArgsUsage: "bash|zsh|fish",
		Action: func(c *cli.Context) error {
			switch c.Args().First() {
			case "bash":
				fmt.Fprint(c.App.Writer, bashCompletion)
			case "zsh":
				fmt.Fprint(c.App.Writer, zshCompletion)
			case "fish":
				s, err := c.App.ToFishCompletion()
				if err != nil {
					return err
				}
				fmt.Fprint(c.App.Writer, s)
			default:
				return usagef("dispatch completion bash", "completion takes bash, zsh or fish")
			}
			return nil
		},
	}
}

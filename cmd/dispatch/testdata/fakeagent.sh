#!/bin/sh
# A stand-in for the claude, codex and gemini CLIs at the process boundary:
# installed under each of those names, it reads the prompt from stdin like
# the real ones, acts on plain markers in it, writes files in its working
# directory (the task's output/), and prints usage the way each CLI does.
# It never prints or stores the secret it is given; it records a hash.
tool=$(basename "$0")
prompt=$(cat)
# What it saw goes next to output/, in the task directory on the node.
seen="$(dirname "$PWD")"
printf '%s\n' "$prompt" > "$seen/seen-prompt.txt"
printf '%s\n' "$@" > "$seen/seen-args.txt"
if [ -n "$ANTHROPIC_AUTH_TOKEN" ]; then
  printf %s "$ANTHROPIC_AUTH_TOKEN" | sha256sum | cut -d' ' -f1 > "$seen/seen-secret.sha256"
fi

# Its final message: the text of the prompt's line "REPORT <text>" (no
# quotes or backslashes in it), else "done".
report=$(printf '%s\n' "$prompt" | sed -n 's/^REPORT //p' | head -n 1)
[ -n "$report" ] || report=done

usage() {
  case "$tool" in
    claude)
      echo '{"type":"system","subtype":"init","session_id":"s1"}'
      echo '{"type":"assistant","message":{"content":[{"type":"text","text":"done"}]}}'
      echo '{"type":"result","subtype":"success","is_error":false,"duration_ms":12,"num_turns":1,"result":"'"$report"'","session_id":"s1","total_cost_usd":0.0125,"usage":{"input_tokens":100,"cache_creation_input_tokens":20,"cache_read_input_tokens":30,"output_tokens":50}}'
      ;;
    codex) echo "tokens used: 1,000" ;;
    gemini) echo '{"response":"done","stats":{"models":{"gemini-2.5-pro":{"tokens":{"prompt":70,"candidates":7,"total":77}}}}}' ;;
  esac
}

# A rate limit on the first attempt only (the marker lives outside output/).
if printf '%s' "$prompt" | grep -q 'RATE_LIMIT_ONCE'; then
  marker="$(dirname "$PWD")/.rate-limited"
  if [ ! -e "$marker" ]; then
    : > "$marker"
    # Each CLI says it in its own structured form: a reset is read from
    # nothing else.
    case "$tool" in
      claude) echo '{"type":"result","subtype":"success","is_error":true,"result":"API Error: 429 Too Many Requests: rate limit reached, retry after 3s"}' ;;
      codex) echo '{"type":"turn.failed","error":{"message":"exceeded retry limit, last status: 429 Too Many Requests, retry after 3s"}}' ;;
      gemini) printf '%s\n' "Attempt 1 failed: Quota exceeded. Please retry in 3s." "Suggested retry after 3s.. Retrying after 3000ms..." ;;
    esac
    exit 1
  fi
fi

case "$prompt" in
  "# Integrate the outputs"*)
    echo "integrated by $tool" > INTEGRATION.md
    ;;
  "# Verify"*)
    if [ -e FIXED.txt ]; then
      echo '{"pass": true, "issues": []}' > verdict.json
    else
      echo '{"pass": false, "issues": ["FIXED.txt is missing from the tree"]}' > verdict.json
    fi
    ;;
  "# Fix"*)
    if printf '%s' "$prompt" | grep -q 'FIXED.txt is missing'; then
      echo fixed > FIXED.txt
      echo "added FIXED.txt" > FIX.md
    fi
    ;;
  *)
    # Author tasks: every line "FILE <path> <content>" writes a file.
    printf '%s\n' "$prompt" | while read -r word path content; do
      if [ "$word" = FILE ]; then
        mkdir -p "$(dirname "$path")"
        printf '%s\n' "$content" > "$path"
      fi
    done
    ;;
esac
usage

package launchfile

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/dispatch-tool/dispatch/wrapper/errkind"
)

// readEnvMap reads the JSON object of environment variables `run` gets on
// stdin. Values are secrets: they are kept in memory only and never quoted
// in errors.
func ReadEnv(r io.Reader) (map[string]string, error) {
	const max = 1 << 20
	data, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return nil, errkind.IO(fmt.Errorf("read environment from stdin: %w", err))
	}
	if len(data) > max {
		return nil, errkind.Usagef("environment on stdin is larger than %d bytes", max)
	}
	env := map[string]string{}
	if len(strings.TrimSpace(string(data))) == 0 {
		return env, nil
	}
	if err := json.Unmarshal(data, &env); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			return nil, errkind.Usagef("environment on stdin: want a JSON object of strings")
		}
		return nil, errkind.Usagef("environment on stdin: invalid JSON")
	}
	if err := CheckEnv(env); err != nil {
		return nil, err
	}
	return env, nil
}

// checkEnvMap refuses a variable name that is empty or holds '=' or NUL, and
// a value with NUL. Values are secrets and never quoted.
func CheckEnv(env map[string]string) error {
	for k, v := range env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return errkind.Usagef("environment: invalid variable name %q or NUL in its value", k)
		}
	}
	return nil
}

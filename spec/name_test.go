package spec

import (
	"errors"
	"strings"
	"testing"
)

func TestValidName(t *testing.T) {
	tests := []struct {
		name    string
		problem string // "" for a valid name
	}{
		{"demo", ""},
		{"S01-add-login", ""},
		{"a.b_c-d", ""},
		{"0x", ""},
		{"", "empty"},
		{"a/b", "contains a slash"},
		{`a\b`, "contains a backslash"},
		{"..", `contains ".."`},
		{"a..b", `contains ".."`},
		{".hidden", "starts with a dot"},
		{"-rf", `starts with '-'`},
		{"_x", `starts with '_'`},
		{"x;rm -rf", "contains shell metacharacter ';'"},
		{"$(id)", "contains shell metacharacter '$'"},
		{"`id`", "contains shell metacharacter '`'"},
		{"a b", "contains whitespace ' '"},
		{"a\tb", `contains whitespace '\t'`},
		{"a\nb", `contains whitespace '\n'`},
		{"a\x00b", `contains '\x00'`},
		{"café", `contains 'é'; only ASCII letters`},
		{strings.Repeat("a", 251), "longer than 250 bytes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidName(tc.name)
			if tc.problem == "" {
				if err != nil {
					t.Errorf("ValidName(%q) = %v, want nil", tc.name, err)
				}
				return
			}
			var ne *NameError
			if !errors.As(err, &ne) || ne.Name != tc.name || !strings.Contains(ne.Problem, tc.problem) {
				t.Fatalf("ValidName(%q) = %v, want a *NameError saying %q", tc.name, err, tc.problem)
			}
			if !strings.Contains(err.Error(), namePattern) {
				t.Errorf("error %q does not state the rule", err)
			}
		})
	}
}

func TestIDPattern(t *testing.T) {
	for s, want := range map[string]bool{"S01": true, "V2": true, "F10": true, "S": false, "s01": false, "S01a": false, "SS1": false} {
		if got := IDPattern.MatchString(s); got != want {
			t.Errorf("IDPattern.MatchString(%q) = %v, want %v", s, got, want)
		}
	}
}

package subcmd

import (
	"bytes"
	"testing"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/errkind"
)

// TestParse: a bad flag and a positional argument are usage errors named
// by the command; a required directory must be given.
func TestParse(t *testing.T) {
	for _, tc := range []struct {
		args []string
		dir  string
		want string // the error, "" for none
	}{
		{[]string{"--dir", "/w/p/tasks/S01"}, "/w/p/tasks/S01", ""},
		{[]string{"--nope"}, "", "kill: flag provided but not defined: -nope"},
		{[]string{"--dir", "/w", "extra"}, "", `kill: unexpected argument "extra"`},
		{nil, "", "kill: --dir is required"},
	} {
		fs := FlagSet("kill")
		dir := fs.String("dir", "", "")
		err := Parse(fs, tc.args)
		if err == nil {
			var got string
			got, err = DirFlag("kill", *dir)
			if err == nil && got != tc.dir {
				t.Errorf("%v: dir %q, want %q", tc.args, got, tc.dir)
			}
		}
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v: %v", tc.args, err)
		case tc.want != "" && (err == nil || err.Error() != tc.want || errkind.Of(err) != wire.KindUsage):
			t.Errorf("%v: %v (kind %q), want the usage error %q", tc.args, err, errkind.Of(err), tc.want)
		}
	}
	var b bytes.Buffer
	if err := PrintJSON(&b, map[string]int{"a": 1}); err != nil || b.String() != "{\"a\":1}\n" {
		t.Errorf("PrintJSON: %q, %v", b.String(), err)
	}
}

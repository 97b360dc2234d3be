package launchfile

import (
	"testing"

	"github.com/dispatch-tool/dispatch/wire"
)

// TestNormalizeLaunchNetworkDefault: network_default marks an allow list;
// with any other network launch.json is refused.
func TestNormalizeLaunchNetworkDefault(t *testing.T) {
	for _, c := range []struct {
		network string
		ok      bool
	}{{wire.NetworkAllow, true}, {"", false}, {wire.NetworkOpen, false}, {wire.NetworkNone, false}} {
		l := wire.Launch{Command: []string{"true"}, Sandbox: wire.SandboxAuto, WorkDir: "/w", Network: c.network, NetworkDefault: true}
		if err := Normalize(&l); (err == nil) != c.ok {
			t.Errorf("network %q with network_default: %v; want ok %v", c.network, err, c.ok)
		}
	}
}

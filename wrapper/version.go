package wrapper

import "time"

// Version is the wrapper's version, reported by `version` and written into
// every status.json. Release builds set it with
// -ldflags "-X github.com/dispatch-tool/dispatch/wrapper.Version=...".
var Version = "dev"

func seconds(s float64) time.Duration {
	return time.Duration(s * float64(time.Second))
}

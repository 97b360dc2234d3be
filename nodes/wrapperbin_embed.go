//go:build embedwrappers

package nodes

import "embed"

//go:embed wrappers/VERSION wrappers/dispatch-wrapper-*
var embedded embed.FS

func init() { embeddedWrappers = embedded }

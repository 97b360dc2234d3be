//go:build !unix

package spec

import "os"

const openReadFlags = os.O_RDONLY

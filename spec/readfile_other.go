//go:build !unix

package spec

import "os"

const openReadFlags = os.O_RDONLY

// openNoFollowFlags: no O_NOFOLLOW here; Windows is not a target.
const openNoFollowFlags = openReadFlags

func isLinkErr(error) bool { return false }

//go:build !linux

package sshdtest

import "syscall"

const canListDescendants = false

func sysProcAttr() *syscall.SysProcAttr { return nil }

// freezeDescendants cannot find the processes under root without /proc;
// Stop then ends only the listener, and connections it served end when
// their clients close.
func freezeDescendants(root int) []int { return nil }

//go:build !linux

package main

import (
	"errors"
	"time"
)

// spreadDirs is Linux's ext4 T attribute; other systems have none.
func spreadDirs(string) error { return errors.ErrUnsupported }

// createCost is measured on Linux only.
func createCost(string) (time.Duration, error) { return 0, errors.ErrUnsupported }

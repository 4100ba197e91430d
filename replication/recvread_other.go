//go:build !unix

package replication

import (
	"errors"
	"syscall"
)

// setRcvLowat is not supported here: quietWait sleeps as it is.
func setRcvLowat(syscall.RawConn, int) error { return errors.ErrUnsupported }

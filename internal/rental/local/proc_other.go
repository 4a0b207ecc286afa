//go:build !unix

package local

import (
	"context"
	"errors"
	"syscall"
)

// supported is false: workers are managed as unix process groups.
const supported = false

func ownGroup() *syscall.SysProcAttr { return nil }

func lockBoot(context.Context, string) (func(), error) {
	return nil, errors.New("local rentals need a unix host")
}

func probe(int, string) (bool, string) { return false, "" }

func terminate(context.Context, int, string) error {
	return errors.New("local rentals need a unix host")
}

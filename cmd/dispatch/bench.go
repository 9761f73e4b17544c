package main

import (
	"context"
	"errors"
	"io"
)

func runBench(ctx context.Context, args []string, environ []string, stdout, stderr io.Writer) error {
	return errors.New("bench: not implemented yet")
}

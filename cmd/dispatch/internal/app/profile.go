package app

import (
	"fmt"
	"os"
	"runtime/pprof"
)

// startCPUProfile writes a pprof CPU profile of the process to path
// (DISPATCH_CPU_PROFILE) until stop is called; dispatch-bench -cpuprofile
// sets it for the processes it starts.
func startCPUProfile(path string) (stop func() error, err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	return func() error {
		pprof.StopCPUProfile()
		return f.Close()
	}, nil
}

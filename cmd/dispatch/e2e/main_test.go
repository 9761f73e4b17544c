package e2e

import (
	"os"
	"path/filepath"
	"testing"
)

// TestMain removes the dispatch binary the chaos tests built.
func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		_ = os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

package e2e

import (
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/dispatchhq/dispatch/router/sqstest"
)

// parallel is how many of the package's tests run at once when go test is
// not given -parallel. Its default, GOMAXPROCS (2 in CI), left the machine
// idle for most of the run: these tests wait (for leases, visibility
// timeouts, backoffs, child processes) far more than they compute. More
// than six bought no time on two cores, only load and PostgreSQL
// connections, which the other packages' tests share.
const parallel = 6

// TestMain runs the tests `parallel` at a time unless -parallel says
// otherwise, sets the AWS variables before any test goes parallel, and
// removes the dispatch binary the tests built.
func TestMain(m *testing.M) {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		if err := flag.Set("test.parallel", strconv.Itoa(parallel)); err != nil {
			panic(err)
		}
	}
	sqstest.SetEnv()
	code := m.Run()
	if binPath != "" {
		_ = os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

// Command hookledger-dev is hookledger with its development tools: every
// hookledger command, plus dev (serve with development defaults), devdb
// (the development database's URL), bench, bench-redis and new module (the
// scaffold of a feature module). The tools start throwaway PostgreSQL
// clusters and benchmark servers or write into a checkout, so they stay out
// of the hookledger binary that is shipped.
package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/hookledger/hookledger/app"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run runs the hookledger-dev command line and returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return app.MainWith(ctx, "hookledger-dev", args, stdout, stderr,
		devCommand(),
		devDBCommand(),
		benchCommand(),
		benchRedisCommand(),
		app.NewModuleCommand(),
	)
}

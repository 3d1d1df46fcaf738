// Command hookledger is the idempotent webhook receiver: see
// `hookledger help`.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/hookledger/hookledger/app"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := app.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

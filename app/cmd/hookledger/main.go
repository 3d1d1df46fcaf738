// Command hookledger is the idempotent webhook receiver: see
// `hookledger help`.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	// CA roots compiled in, used where the system has none (the container
	// image has no certificate store), so replay's HTTPS calls verify.
	_ "golang.org/x/crypto/x509roots/fallback"

	"github.com/hookledger/hookledger/app"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := app.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

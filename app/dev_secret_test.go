package app_test

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/app"
	"github.com/hookledger/hookledger/config"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
)

// clearSources empties every provider secret and the config file in the
// environment, for a command that reads it.
func clearSources(t *testing.T) {
	for _, k := range []string{"STRIPE_WEBHOOK_SECRET", "GITHUB_WEBHOOK_SECRET", "SHOPIFY_WEBHOOK_SECRET", "PADDLE_WEBHOOK_SECRET",
		"SLACK_SIGNING_SECRET", "STANDARD_WEBHOOK_SECRET", "STANDARD_WEBHOOK_PUBLIC_KEY", "HOOKLEDGER_CONFIG", "HTTP_ADDR"} {
		t.Setenv(k, "")
	}
}

// TestServeRefusesTheDevSecret: the Stripe secret of hookledger-dev dev
// is public, so a production source holding it would claim events anyone
// signs. `hookledger serve` exits 1 naming the source and the secret's
// position, alone or beside a real secret. (Without the refusal serve
// would run until the deadline and exit 0.)
func TestServeRefusesTheDevSecret(t *testing.T) {
	clearSources(t)
	db := dbtest.New(t)
	t.Setenv("DATABASE_URL", db.URL)
	t.Setenv("HTTP_ADDR", "127.0.0.1:0")
	t.Setenv("LOG_LEVEL", "error")
	serveFor := func() (int, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		code, _, stderr := runCtx(ctx, "serve")
		return code, stderr
	}

	t.Setenv("STRIPE_WEBHOOK_SECRET", config.DevSecret)
	code, stderr := serveFor()
	require.Equal(t, app.ExitFailure, code, stderr)
	require.Contains(t, stderr, "source stripe: secret 0 is whsec_hookledger_dev, the public development secret")

	t.Setenv("STRIPE_WEBHOOK_SECRET", "")
	t.Setenv("GITHUB_WEBHOOK_SECRET", "a-github-secret-long-enough,"+config.DevSecret)
	code, stderr = serveFor()
	require.Equal(t, app.ExitFailure, code, stderr)
	require.Contains(t, stderr, "source github: secret 1 is whsec_hookledger_dev")
	require.NotContains(t, stderr, "a-github-secret-long-enough", "the real secret is not printed")
}

// TestDevListensOnLoopbackByDefault: hookledger-dev dev's Stripe secret is
// public, so without HTTP_ADDR it listens on 127.0.0.1 only, not on every
// interface; HTTP_ADDR still chooses.
func TestDevListensOnLoopbackByDefault(t *testing.T) {
	clearSources(t)
	cfg, err := config.LoadDev()
	require.NoError(t, err)
	host, port, err := net.SplitHostPort(cfg.HTTPAddr)
	require.NoError(t, err)
	addr, err := netip.ParseAddr(host)
	require.NoError(t, err, "a host, not every interface: %q", cfg.HTTPAddr)
	require.True(t, addr.IsLoopback(), cfg.HTTPAddr)
	require.Equal(t, "8080", port)
	require.Equal(t, []config.Secret{config.DevSecret}, cfg.Sources[0].Secrets)

	t.Setenv("HTTP_ADDR", ":9090")
	cfg, err = config.LoadDev()
	require.NoError(t, err)
	require.Equal(t, ":9090", cfg.HTTPAddr, "HTTP_ADDR overrides")
}

// runCtx runs the hookledger command line until ctx ends.
func runCtx(ctx context.Context, args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := app.Main(ctx, args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

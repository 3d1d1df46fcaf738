package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/config"
	"github.com/hookledger/hookledger/modules/core/provider"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
)

// TestDevReportsAPortInUse: dev takes the port first, and says so before
// anything else when it is taken.
func TestDevReportsAPortInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	t.Setenv("HTTP_ADDR", ln.Addr().String())
	t.Setenv("DATABASE_URL", "postgres://nobody@127.0.0.1:1/none")
	code, stdout, stderr := runDevCLI("dev")
	require.Equal(t, 1, code)
	require.Empty(t, stdout, "no banner")
	require.Contains(t, stderr, "already in use")
	require.Contains(t, stderr, "HTTP_ADDR")
}

// TestDevMigratesAndServes: on an empty database dev migrates, prints its
// banner with the address it holds, takes a delivery signed with the dev
// Stripe secret, and exits 0 when stopped.
func TestDevMigratesAndServes(t *testing.T) {
	db := dbtest.Empty(t)
	t.Setenv("DATABASE_URL", db.URL)
	t.Setenv("HTTP_ADDR", "127.0.0.1:0")
	t.Setenv("LOG_LEVEL", "warn")
	for _, k := range []string{"STRIPE_WEBHOOK_SECRET", "GITHUB_WEBHOOK_SECRET", "SHOPIFY_WEBHOOK_SECRET", "PADDLE_WEBHOOK_SECRET", "SLACK_SIGNING_SECRET", "STANDARD_WEBHOOK_SECRET", "HOOKLEDGER_CONFIG"} {
		t.Setenv(k, "")
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out, w := io.Pipe()
	var stderr bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"dev"}, w, &stderr)
		w.Close()
	}()
	lines := make(chan string, 16)
	go func() {
		defer close(lines)
		for sc := bufio.NewScanner(out); sc.Scan(); {
			lines <- sc.Text()
		}
	}()
	var banner string
	select {
	case banner = <-lines:
	case code := <-done:
		t.Fatalf("dev exited %d before its banner: %s", code, stderr.String())
	}
	m := regexp.MustCompile(`^hookledger dev: (http://127\.0\.0\.1:\d+)  database \S+  sources stripe$`).FindStringSubmatch(banner)
	require.NotNil(t, m, "banner %q", banner)
	base := m[1]

	body := []byte(`{"id":"evt_dev_1","object":"event","type":"customer.subscription.updated","created":1700000000,"data":{"object":{"id":"sub_dev","customer":"cus_dev","status":"active","items":{"data":[{"price":{"id":"price_pro"}}]}}}}`)
	req, err := http.NewRequest(http.MethodPost, base+"/webhooks/stripe", bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Stripe-Signature", provider.SignStripe(string(config.DevSecret), time.Now().Unix(), body))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	dbtest.Eventually(t, func() bool {
		return db.Count(t, `SELECT count(*) FROM webhook_event WHERE event_id = 'evt_dev_1' AND status = 'settled'`) == 1
	}, "the delivery settles")

	cancel()
	require.Equal(t, 0, <-done, stderr.String())
	require.Contains(t, stderr.String(), "applying pending migrations", "dev migrated first")
}

// TestDevDBPrintsDatabaseURL: with DATABASE_URL set, devdb prints it and
// starts nothing.
func TestDevDBPrintsDatabaseURL(t *testing.T) {
	const url = "postgres://dev@127.0.0.1:1/hookledger_devdb"
	t.Setenv("DATABASE_URL", url)
	code, stdout, stderr := runDevCLI("devdb")
	require.Equal(t, 0, code, stderr)
	require.Equal(t, url+"\n", stdout)
}

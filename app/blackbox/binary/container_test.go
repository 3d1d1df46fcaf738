package binary_test

import (
	"bytes"
	"debug/buildinfo"
	"debug/elf"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/core/provider"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
)

// The image's user (distroless' nonroot).
const imageUID = 65532

// TestStaticBinaryInEmptyRoot takes the binary built as the Dockerfile does
// (CGO_ENABLED=0) and runs it as the image's non-root user in a root that
// holds nothing but the binary: migrate up, serve, a delivery and its
// apply, and the image's health check. The image's base needs nothing else.
func TestStaticBinaryInEmptyRoot(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the static binary")
	}
	if os.Geteuid() != 0 {
		t.Skip("chroot needs root")
	}
	root, err := os.MkdirTemp("", "hookledger-root-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(root) })
	require.NoError(t, os.Chmod(root, 0o755))
	bin := filepath.Join(root, "hookledger")
	require.NoError(t, os.Link(hookledgerBinary(t), bin), "the root holds the package's binary, hard-linked")

	f, err := elf.Open(bin)
	require.NoError(t, err)
	for _, p := range f.Progs {
		require.NotEqual(t, elf.PT_INTERP, p.Type, "a static binary has no dynamic loader")
	}
	libs, err := f.ImportedLibraries()
	require.NoError(t, err)
	require.Empty(t, libs, "a static binary needs no shared library")
	f.Close()
	info, err := buildinfo.ReadFile(bin)
	require.NoError(t, err)
	var roots bool
	for _, d := range info.Deps {
		roots = roots || d.Path == "golang.org/x/crypto/x509roots/fallback"
	}
	require.True(t, roots, "CA roots are compiled in")
	entries, err := os.ReadDir(root)
	require.NoError(t, err)
	require.Len(t, entries, 1, "the root holds only the binary")

	db := dbtest.Empty(t)
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	env := []string{"DATABASE_URL=" + db.URL, "HTTP_ADDR=" + addr, "STRIPE_WEBHOOK_SECRET=" + providerSecrets["stripe"], "LOG_LEVEL=warn"}
	inRoot := func(args ...string) *exec.Cmd {
		cmd := exec.Command("/hookledger", args...)
		cmd.Env, cmd.Dir = env, "/"
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root, Credential: &syscall.Credential{Uid: imageUID, Gid: imageUID}}
		dbtest.DiesWithTest(cmd)
		return cmd
	}
	out, err := inRoot("migrate", "up").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Equal(t, 1, db.Count(t, `SELECT count(*) FROM pg_tables WHERE tablename = 'webhook_event'`), "migrate up made the tables")

	serve := inRoot("serve")
	var logs bytes.Buffer
	serve.Stdout, serve.Stderr = &logs, &logs
	require.NoError(t, serve.Start())
	t.Cleanup(func() {
		if serve.ProcessState == nil {
			_ = serve.Process.Kill()
			_ = serve.Wait()
		}
		if t.Failed() {
			t.Logf("serve logs:\n%s", tail(logs.String(), 4000))
		}
	})
	base := "http://" + addr
	dbtest.Eventually(t, func() bool {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, "serve in the empty root becomes ready")
	body := []byte(fmt.Sprintf(`{"id":"evt_chroot_1","object":"event","type":"customer.subscription.updated","created":%d,`+
		`"data":{"object":{"id":"sub_e2e","customer":"cus_e2e","status":"active","items":{"data":[{"price":{"id":"price_pro"}}]}}}}`, time.Now().Unix()))
	require.Equal(t, http.StatusOK, post(t, base+"/webhooks/stripe", body,
		http.Header{"Stripe-Signature": {provider.SignStripe(providerSecrets["stripe"], time.Now().Unix(), body)}}))
	dbtest.Eventually(t, func() bool {
		return db.Count(t, `SELECT count(*) FROM webhook_event WHERE event_id = 'evt_chroot_1' AND status = 'settled'`) == 1
	}, "the delivery is applied")
	require.Equal(t, 1, db.Count(t, `SELECT count(*) FROM subscription WHERE external_id = 'sub_e2e' AND status = 'active'`), "the apply wrote the subscription")

	out, err = inRoot("healthcheck").CombinedOutput()
	require.NoError(t, err, "the image's health check passes: %s", out)

	require.NoError(t, serve.Process.Signal(syscall.SIGTERM))
	require.NoError(t, serve.Wait(), "serve stops cleanly on SIGTERM")
}

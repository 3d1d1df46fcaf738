package app_test

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
	"go.yaml.in/yaml/v3"

	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
)

// The image's user (distroless' nonroot).
const imageUID = 65532

// TestStaticBinaryInEmptyRoot builds the binary as the Dockerfile does
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
	// As the Dockerfile, less -trimpath, which would recompile every
	// package instead of reusing the test build's cache.
	build := exec.Command("go", "build", "-o", bin, "./cmd/hookledger")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)

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
	env := []string{"DATABASE_URL=" + db.URL, "HTTP_ADDR=" + addr, "STRIPE_WEBHOOK_SECRET=" + secret, "LOG_LEVEL=warn"}
	inRoot := func(args ...string) *exec.Cmd {
		cmd := exec.Command("/hookledger", args...)
		cmd.Env, cmd.Dir = env, "/"
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root, Credential: &syscall.Credential{Uid: imageUID, Gid: imageUID}}
		dbtest.DiesWithTest(cmd)
		return cmd
	}
	out, err = inRoot("migrate", "up").CombinedOutput()
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
	s := &server{db: db, base: "http://" + addr}
	dbtest.Eventually(t, func() bool {
		resp, err := http.Get(s.base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, "serve in the empty root becomes ready")
	body := subEvent("evt_chroot_1", "active", time.Now().Unix())
	code, got := s.post(t, "/webhooks/stripe", body, signed(body, time.Now()))
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "claimed", got["status"])
	s.waitSettled(t, "evt_chroot_1")
	require.Equal(t, 1, db.Count(t, `SELECT count(*) FROM subscription WHERE external_id = 'sub_e2e' AND status = 'active'`), "the apply wrote the subscription")

	out, err = inRoot("healthcheck").CombinedOutput()
	require.NoError(t, err, "the image's health check passes: %s", out)

	require.NoError(t, serve.Process.Signal(syscall.SIGTERM))
	require.NoError(t, serve.Wait(), "serve stops cleanly on SIGTERM")
}

// TestComposeFile checks compose.yaml against what the Compose
// specification and hookledger's start-up order need.
func TestComposeFile(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../compose.yaml")
	require.NoError(t, err)
	type service struct {
		Image       string         `yaml:"image"`
		Build       any            `yaml:"build"`
		Command     []string       `yaml:"command"`
		Environment map[string]any `yaml:"environment"`
		DependsOn   map[string]struct {
			Condition string `yaml:"condition"`
		} `yaml:"depends_on"`
		Healthcheck *struct {
			Test []string `yaml:"test"`
		} `yaml:"healthcheck"`
		Profiles []string `yaml:"profiles"`
	}
	var doc struct {
		Services map[string]service `yaml:"services"`
		Volumes  map[string]any     `yaml:"volumes"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(false)
	require.NoError(t, dec.Decode(&doc))
	require.NotEmpty(t, doc.Services, "services is the one required top-level key")
	for name, s := range doc.Services {
		require.True(t, s.Image != "" || s.Build != nil, "service %s has an image or a build", name)
		for dep := range s.DependsOn {
			require.Contains(t, doc.Services, dep, "service %s depends on a defined service", name)
		}
	}
	pg, migrate, serve := doc.Services["postgres"], doc.Services["migrate"], doc.Services["hookledger"]
	require.NotNil(t, pg.Healthcheck, "postgres has a health check")
	require.Equal(t, []string{"migrate", "up"}, migrate.Command)
	require.Equal(t, "service_healthy", migrate.DependsOn["postgres"].Condition)
	require.Equal(t, []string{"serve"}, serve.Command)
	require.Equal(t, "service_completed_successfully", serve.DependsOn["migrate"].Condition, "serve starts after migrate up")
	require.NotNil(t, serve.Healthcheck)
	require.Equal(t, []string{"CMD", "/hookledger", "healthcheck"}, serve.Healthcheck.Test, "no shell in the image: the binary checks itself")
	require.Contains(t, serve.Environment, "DATABASE_URL")
	require.Contains(t, doc.Services["redis"].Profiles, "redis", "Redis is optional")
}

package binary_test

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// hookledgerBinary builds the real binary once per test process, as the
// Dockerfile does (CGO_ENABLED=0: static), less -trimpath, which would
// recompile every package instead of reusing the test build's cache
// (go tool task test builds the tests with CGO_ENABLED=0 too, so only the
// main package is compiled here). Every test of the package runs that one
// binary: the fault tests and the static image's own.
func hookledgerBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "hookledger-bin-")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "hookledger")
		build := exec.Command("go", "build", "-o", binPath, "github.com/hookledger/hookledger/app/cmd/hookledger")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	require.NoError(t, binErr)
	return binPath
}

// proc is a `hookledger serve` process that the test kills at will.
type proc struct {
	t    *testing.T
	env  []string
	addr string
	cmd  *exec.Cmd
	// exited is closed once the process has exited and been waited for.
	exited chan struct{}
	logs   *os.File
	// claimTimeout is the process's CLAIM_TIMEOUT: a delivery is answered
	// within it, 503 at worst, however slow the machine.
	claimTimeout time.Duration
}

func startProc(t *testing.T, databaseURL string, env ...string) *proc {
	t.Helper()
	logs, err := os.CreateTemp("", "hookledger-serve-*.log")
	require.NoError(t, err)
	p := &proc{t: t, addr: fmt.Sprintf("127.0.0.1:%d", freePort(t)), logs: logs}
	p.env = append(os.Environ(),
		"DATABASE_URL="+databaseURL, "HTTP_ADDR="+p.addr, "LOG_LEVEL=warn", fmt.Sprintf("DB_MAX_CONNS=%d", dbtest.MaxConns),
		"STRIPE_WEBHOOK_SECRET="+providerSecrets["stripe"], "STANDARD_WEBHOOK_SECRET="+providerSecrets["standard"],
		"CLAIM_TIMEOUT=1s")
	p.env = append(p.env, env...)
	for _, kv := range p.env {
		if v, ok := strings.CutPrefix(kv, "CLAIM_TIMEOUT="); ok {
			d, err := time.ParseDuration(v)
			require.NoError(t, err)
			p.claimTimeout = d
		}
	}
	t.Cleanup(func() {
		p.stop()
		logs.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logs.Name())
			t.Logf("serve logs:\n%s", tail(string(b), 4000))
		}
		os.Remove(logs.Name())
	})
	p.start()
	return p
}

// start starts serve and waits until it answers; a process that exits
// first (it refused its configuration or database) fails the test at
// once, with its last lines.
func (p *proc) start() {
	cmd := exec.Command(hookledgerBinary(p.t), "serve")
	cmd.Env = p.env
	cmd.Stdout, cmd.Stderr = p.logs, p.logs
	dbtest.DiesWithTest(cmd)
	require.NoError(p.t, cmd.Start())
	exited := make(chan struct{})
	p.cmd, p.exited = cmd, exited
	go func() { _ = cmd.Wait(); close(exited) }()
	dbtest.Eventually(p.t, func() bool {
		select {
		case <-exited:
			b, _ := os.ReadFile(p.logs.Name())
			p.t.Fatalf("serve exited before it answered (%s):\n%s", cmd.ProcessState, tail(string(b), 2000))
		default:
		}
		resp, err := http.Get("http://" + p.addr + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	}, "serve did not come up")
}

// kill9 kills the process the way a crash or an OOM kill does.
func (p *proc) kill9() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

func (p *proc) stop() {
	if p.cmd == nil {
		return
	}
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		p.kill9()
	}
}

// tail is the last n bytes of s.
func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

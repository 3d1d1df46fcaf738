// Package binary_test runs the hookledger binary as a process, as it is
// deployed: killed with SIGKILL under load, its PostgreSQL or Redis
// stopped under it, failed over, and built statically into an empty root.
// These tests spend their time waiting for a process, a cluster or a
// simulator's load; a package of their own runs them beside the app
// package's tests instead of after them.
package binary_test

import (
	"bytes"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestMain removes the hookledger binary the tests built.
func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

// providerSecrets are the serve processes' signing secrets.
var providerSecrets = map[string]string{
	"stripe":   "whsec_stripe_http",
	"standard": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
}

// freePort is a TCP port free on 127.0.0.1 a moment ago.
func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// post delivers body to url with header and returns the answer's code.
func post(t *testing.T, url string, body []byte, header http.Header) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	require.NoError(t, err)
	req.Header = header
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	return resp.StatusCode
}

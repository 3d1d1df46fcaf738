// Package stripemock starts Stripe's official API mock, stripe-mock, for a
// test: it answers every endpoint of Stripe's OpenAPI specification with
// fixture objects, and refuses a parameter the real API would refuse.
// `go tool task stripe-mock` installs it as bin/stripe-mock; `go tool task
// test` sets STRIPE_MOCK to it. The mock keeps no state (every id answers
// the same fixture, nothing is ever missing), so a test that needs Stripe
// to change or lack an object serves its own fake; List and Missing answer
// as Stripe's list and retrieve do.
package stripemock

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
)

// Key is an API key the mock accepts.
const Key = "sk_test_123"

// Start runs the mock STRIPE_MOCK names until the test ends and returns
// its base URL; the test is skipped when STRIPE_MOCK is not set.
func Start(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("STRIPE_MOCK")
	if bin == "" {
		t.Skip("STRIPE_MOCK is not set; go tool task stripe-mock installs bin/stripe-mock")
	}
	port := freePort(t)
	cmd := exec.Command(bin, "-http-port", fmt.Sprint(port), "-https-port", fmt.Sprint(freePort(t)))
	dbtest.DiesWithTest(cmd)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	dbtest.Eventually(t, func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	}, "stripe-mock never listened on %s", addr)
	return "http://" + addr
}

func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// List answers a Stripe list request over objs, by id: the page after
// starting_after, of limit objects, of those created at or after
// created[gte] (an object without an int64 created is always listed).
func List(w http.ResponseWriter, q url.Values, objs map[string]map[string]any) {
	gte, _ := strconv.ParseInt(q.Get("created[gte]"), 10, 64)
	ids := make([]string, 0, len(objs))
	for id, o := range objs {
		if created, ok := o["created"].(int64); !ok || created >= gte {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	start := 0
	if after := q.Get("starting_after"); after != "" {
		start = slices.Index(ids, after) + 1
	}
	limit, err := strconv.Atoi(q.Get("limit"))
	if err != nil || limit <= 0 {
		limit = 10
	}
	end := min(start+limit, len(ids))
	data := []any{}
	for _, id := range ids[start:end] {
		data = append(data, objs[id])
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": data, "has_more": end < len(ids)})
}

// Missing answers as Stripe does for an object it does not have.
func Missing(w http.ResponseWriter) {
	http.Error(w, `{"error":{"code":"resource_missing","message":"No such object","type":"invalid_request_error"}}`, http.StatusNotFound)
}

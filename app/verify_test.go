package app_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/app"
)

type vector struct {
	Provider    string            `json:"provider"`
	Description string            `json:"description"`
	Secret      string            `json:"secret"`
	Headers     map[string]string `json:"headers"`
	BodyBase64  string            `json:"body_base64"`
	NowUnix     *int64            `json:"now_unix"`
	Expect      string            `json:"expect"`
	Tolerance   *float64          `json:"tolerance_seconds"`
}

func run(args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := app.Main(context.Background(), args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// TestVerifyCommandVectors runs every entry of signatures.json through
// `hookledger verify`.
func TestVerifyCommandVectors(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../testdata/providers/signatures.json")
	require.NoError(t, err)
	var vectors []vector
	require.NoError(t, json.Unmarshal(raw, &vectors))
	require.Len(t, vectors, 67)
	dir := t.TempDir()
	for i, v := range vectors {
		t.Run(v.Provider+"/"+v.Description, func(t *testing.T) {
			body, err := base64.StdEncoding.DecodeString(v.BodyBase64)
			require.NoError(t, err)
			checkVector(t, v, body, filepath.Join(dir, fmt.Sprintf("body-%d", i)))
		})
	}
}

func TestVerifyCommandUsage(t *testing.T) {
	t.Parallel()
	body := filepath.Join(t.TempDir(), "body")
	require.NoError(t, os.WriteFile(body, []byte("{}"), 0o600))
	for _, args := range [][]string{
		{"verify"},
		{"verify", "--provider", "nope", "--secret", "s", "--body-file", body},
		{"verify", "--provider", "stripe", "--body-file", body},
		{"verify", "--provider", "stripe", "--secret", "s"},
		{"verify", "--provider", "stripe", "--secret", "s", "--body-file", body, "--header", "novalue"},
		{"verify", "--provider", "stripe", "--secret", "s", "--body-file", body, "--at", "yesterday"},
		{"verify", "--provider", "stripe", "--secret", "s", "--body-file", body, "--tolerance", "soon"},
		{"verify", "--provider", "standard", "--secret", "not base64!", "--body-file", body},
		// A public key without its prefix would verify as a v1 secret.
		{"verify", "--provider", "standard", "--public-key", "6/WfjCrmmUwoIE/o0BcxQdgpS3LjR98L7Nnx6v3ekFA=", "--body-file", body},
		{"verify", "--bogus"},
	} {
		code, _, stderr := run(args...)
		require.Equal(t, 2, code, "%v: %s", args, stderr)
	}
}

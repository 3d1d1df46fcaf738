package app_test

import (
	"context"
	"crypto/pbkdf2"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/config"
	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/core/provider"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
)

// fingerprintKey is the deployment's fingerprint key, as a process on db
// reads it.
func fingerprintKey(t testing.TB, db *dbtest.DB) []byte {
	t.Helper()
	key, err := ledger.FingerprintKey(context.Background(), db.SQL)
	require.NoError(t, err)
	require.Len(t, key, 32)
	return key
}

// TestSecretFingerprintKeyedPerDeployment is the guessing attack on the
// fingerprint the console shows: a GitHub secret people type
// (summer2024), and a three-word loop of seasons and years over the
// published derivation. With one salt for every deployment the loop found
// the secret; keyed with the deployment's key it finds nothing, even with
// the derivation known and an empty key tried, and two deployments with
// one secret show different fingerprints. A restart and a rotation keep
// the fingerprint, and start-up warns about the short secret.
func TestSecretFingerprintKeyedPerDeployment(t *testing.T) {
	t.Parallel()
	const weak = "summer2024"
	env := func(secrets string) map[string]string {
		return map[string]string{"GITHUB_WEBHOOK_SECRET": secrets, "ADMIN_TOKEN": adminToken}
	}
	ping := func(s *server, id string, n int) {
		t.Helper()
		body := []byte(fmt.Sprintf(`{"zen":"Keep it logically awesome.","hook_id":%d}`, n))
		h, err := provider.GitHub.Sign(weak, provider.Delivery{ID: id, Type: "ping", Body: body})
		require.NoError(t, err)
		code, out := s.post(t, "/webhooks/github", body, h)
		require.Equal(t, http.StatusOK, code, "%v", out)
		require.Equal(t, "claimed", out["status"], id)
	}
	recorded := func(db *dbtest.DB, id string) string {
		t.Helper()
		var fp string
		require.NoError(t, db.SQL.QueryRow(`SELECT secret_fingerprint FROM webhook_event WHERE event_id = $1`, id).Scan(&fp))
		return fp
	}

	db1, db2 := dbtest.New(t), dbtest.New(t)
	s1 := startOn(t, db1, env(weak), config.RoleAll)
	ping(s1, "fp-1", 1)
	fp1 := recorded(db1, "fp-1")
	require.Equal(t, []string{"#0 <code>" + fp1 + "</code>: 1"}, s1.secretsShown(t, "github"), "the console shows it")
	s2 := startOn(t, db2, env(weak), config.RoleAll)
	ping(s2, "fp-2", 2)
	require.NotEqual(t, fp1, recorded(db2, "fp-2"), "another deployment, the same secret: another fingerprint")

	// The attacker's loop: the fingerprint as published (PBKDF2-SHA256,
	// 20,000 iterations, 6 bytes) with its one salt, and the keyed one
	// with an empty key.
	unkeyed := func(guess string) string {
		k, err := pbkdf2.Key(sha256.New, guess, []byte("hookledger secret fingerprint"), 20000, 6)
		require.NoError(t, err)
		return hex.EncodeToString(k)
	}
	var found []string
	for _, season := range []string{"spring", "summer", "autumn", "winter"} {
		for year := 2020; year <= 2026; year++ {
			for _, guess := range []string{fmt.Sprint(season, year), fmt.Sprint(strings.ToUpper(season[:1])+season[1:], year)} {
				if unkeyed(guess) == fp1 || provider.SecretFingerprint(nil, []byte(guess)) == fp1 {
					found = append(found, guess)
				}
			}
		}
	}
	require.Empty(t, found, "the guessing loop recovers no secret from the fingerprint")
	require.Equal(t, fp1, provider.SecretFingerprint(fingerprintKey(t, db1), []byte(weak)), "with the deployment's key it is the secret's")

	// A restart with the secret rotated to the second position.
	require.NoError(t, s1.stop())
	s1 = startOn(t, db1, env("a-new-secret-long-enough-to-keep,"+weak), config.RoleAll)
	ping(s1, "fp-3", 3)
	require.Equal(t, fp1, recorded(db1, "fp-3"), "the same fingerprint after a restart and a rotation")

	cfg, err := config.FromEnv(func(k string) string { return map[string]string{"GITHUB_WEBHOOK_SECRET": weak}[k] })
	require.NoError(t, err)
	require.Contains(t, strings.Join(cfg.Warnings, "\n"), "source github: secret 0 is shorter than 16 bytes")
}

package bench

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/core/provider"
)

func TestReferenceVerifiesStripeSignatures(t *testing.T) {
	t.Parallel()
	body := []byte(`{"id":"evt_1","type":"customer.subscription.updated"}`)
	now := time.Now()
	header := provider.SignStripe(benchSecret, now.Unix(), body)
	require.NoError(t, verifyStripeSignature(header, body, []byte(benchSecret), now))
	require.Error(t, verifyStripeSignature(header, append(body, ' '), []byte(benchSecret), now), "a changed body")
	require.Error(t, verifyStripeSignature(header, body, []byte("whsec_other"), now), "another secret")
	require.Error(t, verifyStripeSignature(header, body, []byte(benchSecret), now.Add(refTolerance+time.Second)), "too old")
	require.Error(t, verifyStripeSignature("t=1", body, []byte(benchSecret), now), "no signature")
}

package app_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hookledger/hookledger/modules/core/provider"
)

// FuzzWebhookRequest drives the whole request path of the real app:
// arbitrary bodies, signed correctly or carrying arbitrary signature
// headers, to every provider. Nothing may answer 5xx or panic.
func FuzzWebhookRequest(f *testing.F) {
	s := start(f, map[string]string{
		"GITHUB_WEBHOOK_SECRET": providerSecrets["github"], "SHOPIFY_WEBHOOK_SECRET": providerSecrets["shopify"],
		"PADDLE_WEBHOOK_SECRET": providerSecrets["paddle"], "SLACK_SIGNING_SECRET": providerSecrets["slack"],
		"STANDARD_WEBHOOK_SECRET": providerSecrets["standard"], "MAX_BODY_BYTES": "4096",
	})
	f.Add([]byte(`{"id":"evt_1","type":"customer.subscription.updated","created":1,"data":{"object":{"id":"sub_1","status":"active"}}}`), "t=1,v1=00", true, uint8(0))
	f.Add([]byte(`{"type":"url_verification","challenge":"c"}`), "", true, uint8(4))
	f.Add([]byte(`{"type":"usage.recorded","data":{"customer_id":"c","metric":"m","quantity":1}}`), "v1,AAAA", true, uint8(5))
	f.Add([]byte(`{"event_id":"e","event_type":"transaction.completed","data":{"id":"txn","details":{"totals":{"grand_total":"x"}}}}`), "ts=1;h1=00", true, uint8(3))
	f.Add([]byte("{\"id\":\"evt_2\",\"type\":\"x\",\"s\":\"\\u0000\"}"), "", true, uint8(0))
	f.Add([]byte(`[]`), "sha256=00", false, uint8(1))
	f.Add([]byte(`{"ref":"refs/heads/main","repository":{"full_name":"a/b","pushed_at":"x"}}`), "", true, uint8(1))
	names := []string{"stripe", "github", "shopify", "paddle", "slack", "standard"}
	f.Fuzz(func(t *testing.T, body []byte, sigHeader string, sign bool, which uint8) {
		name := names[int(which)%len(names)]
		p, _ := provider.Lookup(name)
		var h http.Header
		if sign {
			sum := sha256.Sum256(body)
			var err error
			h, err = p.Sign(providerSecrets[name], provider.Delivery{ID: "fz_" + hex.EncodeToString(sum[:8]), Type: "push", At: time.Now(), Body: body})
			if err != nil {
				t.Fatal(err)
			}
		} else {
			h = http.Header{}
			for _, k := range p.SignatureHeaders {
				h.Set(k, sigHeader)
			}
		}
		req, err := http.NewRequest(http.MethodPost, s.base+"/webhooks/"+name, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range h {
			req.Header[k] = v
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil && strings.Contains(err.Error(), "invalid header field") {
			return // Go's client will not send it; no sender can
		}
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode >= 500 {
			t.Fatalf("%s answered %d to %q", name, resp.StatusCode, body)
		}
	})
}

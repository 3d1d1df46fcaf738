package app_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/google/go-github/v74/github"
	"github.com/slack-go/slack"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stripe/stripe-go/v82/webhook"
)

// senderSign builds the headers a provider's sender attaches to a delivery,
// without hookledger's own signing code: Stripe and Standard Webhooks
// deliveries are signed by the providers' official Go libraries; GitHub,
// Slack, Shopify and Paddle signatures are written here and, like all of
// them, reproduce the published vectors (TestCorpusSignerMatchesVectors).
func senderSign(f corpusFile, secret string, at time.Time) (http.Header, error) {
	ts := strconv.FormatInt(at.Unix(), 10)
	h := http.Header{}
	switch f.Provider {
	case "stripe":
		signed := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: f.body, Secret: secret, Timestamp: at})
		h.Set("Stripe-Signature", signed.Header)
	case "github":
		h.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(hmacSum([]byte(secret), f.body)))
		h.Set("X-GitHub-Event", f.HeaderType)
		h.Set("X-GitHub-Delivery", f.EventID)
		h.Set("X-GitHub-Hook-ID", "292430182")
		h.Set("User-Agent", "GitHub-Hookshot/9729b30")
	case "shopify":
		h.Set("X-Shopify-Hmac-Sha256", base64.StdEncoding.EncodeToString(hmacSum([]byte(secret), f.body)))
		h.Set("X-Shopify-Topic", f.HeaderType)
		h.Set("X-Shopify-Event-Id", f.EventID)
		h.Set("X-Shopify-Webhook-Id", f.EventID)
		h.Set("X-Shopify-Shop-Domain", "example.myshopify.com")
		h.Set("X-Shopify-API-Version", "2026-07")
		h.Set("X-Shopify-Triggered-At", at.UTC().Format(time.RFC3339Nano))
	case "paddle":
		h.Set("Paddle-Signature", "ts="+ts+";h1="+hex.EncodeToString(hmacSum([]byte(secret), []byte(ts+":"), f.body)))
	case "slack":
		h.Set("X-Slack-Request-Timestamp", ts)
		h.Set("X-Slack-Signature", "v0="+hex.EncodeToString(hmacSum([]byte(secret), []byte("v0:"+ts+":"), f.body)))
	case "standard":
		wh, err := standardwebhooks.NewWebhook(secret)
		if err != nil {
			return nil, err
		}
		sig, err := wh.Sign(f.EventID, at, f.body)
		if err != nil {
			return nil, err
		}
		prefix := "Webhook-"
		if f.Headers == "svix" {
			prefix = "Svix-"
		}
		h.Set(prefix+"Id", f.EventID)
		h.Set(prefix+"Timestamp", ts)
		h.Set(prefix+"Signature", sig)
	default:
		return nil, fmt.Errorf("no sender for provider %q", f.Provider)
	}
	return h, nil
}

// officialVerify checks a fresh delivery with the provider's official Go
// library where one exists (go-github, slack-go, stripe-go, Standard
// Webhooks); Shopify and Paddle have none worth depending on.
func officialVerify(f corpusFile, h http.Header, secret string) error {
	switch f.Provider {
	case "github":
		_, err := github.ValidatePayloadFromBody("application/json", bytes.NewReader(f.body), h.Get("X-Hub-Signature-256"), []byte(secret))
		return err
	case "slack":
		sv, err := slack.NewSecretsVerifier(h, secret)
		if err != nil {
			return err
		}
		if _, err := sv.Write(f.body); err != nil {
			return err
		}
		return sv.Ensure()
	case "stripe":
		return webhook.ValidatePayload(f.body, h.Get("Stripe-Signature"), secret)
	case "standard":
		wh, err := standardwebhooks.NewWebhook(secret)
		if err != nil {
			return err
		}
		unbranded := http.Header{}
		for _, name := range []string{"Id", "Timestamp", "Signature"} {
			unbranded.Set("Webhook-"+name, h.Get("Webhook-"+name)+h.Get("Svix-"+name))
		}
		return wh.Verify(f.body, unbranded)
	}
	return nil
}

func hmacSum(key []byte, parts ...[]byte) []byte {
	mac := hmac.New(sha256.New, key)
	for _, p := range parts {
		mac.Write(p)
	}
	return mac.Sum(nil)
}
